#include "engine/stop_strings.h"

#include <gtest/gtest.h>

namespace hubzoo {
namespace {

// Feeds pieces; returns (released text, stopped).
std::pair<std::string, bool> feed(StopStrings& s, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) {
    auto r = s.push(p);
    out += r.text;
    if (r.stopped) return {out, true};
  }
  return {out + s.flush(), false};
}

TEST(StopStrings, NoStopsReleasesEverythingAtOnce) {
  StopStrings s;
  EXPECT_EQ(s.push("abc").text, "abc");
  EXPECT_EQ(s.flush(), "");
}

TEST(StopStrings, MatchSpanningPiecesEndsBeforeIt) {
  StopStrings s({"</end>"});
  EXPECT_EQ(feed(s, {"hello <", "/e", "nd> more"}), std::make_pair(std::string("hello "), true));
}

TEST(StopStrings, HoldsBackOnlyWhatCouldStillMatch) {
  StopStrings s({"abc"});
  auto r = s.push("xxab");
  EXPECT_EQ(r.text, "xx");
  r = s.push("d");  // "abd" cannot match any more
  EXPECT_EQ(r.text, "abd");
  EXPECT_FALSE(r.stopped);
  r = s.push("a");
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(s.flush(), "a");
}

TEST(StopStrings, EarliestOfSeveralWins) {
  StopStrings s({"world", "lo w", ""});
  auto r = s.push("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "hel");
  EXPECT_EQ(r.matched, "lo w");
}

TEST(StopStrings, OverlappingPrefixes) {
  StopStrings s({"aab"});
  EXPECT_EQ(feed(s, {"a", "a", "a", "b", "c"}), std::make_pair(std::string("a"), true));
  StopStrings t({"aab"});
  EXPECT_EQ(feed(t, {"a", "a", "a", "c"}), std::make_pair(std::string("aaac"), false));
}

TEST(StopStrings, MultiByteCharactersStayWhole) {
  StopStrings s({"\xC3\xA9t\xC3\xA9"});  // "été"
  auto r = s.push("caf\xC3\xA9");
  EXPECT_EQ(r.text, "caf");
  r = s.push("!");
  EXPECT_EQ(r.text, "\xC3\xA9!");
}

}  // namespace
}  // namespace hubzoo
