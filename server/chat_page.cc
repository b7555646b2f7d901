// The web chat page served at `/`: plain HTML and JavaScript, no build step.
// It streams /v1/chat/completions (server-sent events read from fetch), keeps
// the conversation in the page, and exposes temperature, top-p and max tokens.
#include "server/server_impl.h"

namespace hubzoo::server {

const char* const kChatPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hubzoo chat</title>
<style>
  :root { --bg: #f6f7f9; --fg: #1d2330; --muted: #667085; --user: #dbeafe; --bot: #ffffff; --line: #d0d5dd; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.45 system-ui, sans-serif; background: var(--bg); color: var(--fg);
         display: flex; flex-direction: column; height: 100vh; }
  header { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; padding: 8px 16px;
           border-bottom: 1px solid var(--line); background: #fff; }
  header h1 { font-size: 16px; margin: 0 12px 0 0; }
  header label { font-size: 13px; color: var(--muted); display: flex; align-items: center; gap: 4px; }
  header input[type=number] { width: 72px; }
  header input[type=password] { width: 120px; }
  #model { font-size: 13px; color: var(--muted); }
  #log { flex: 1; overflow-y: auto; padding: 16px; display: flex; flex-direction: column; gap: 10px; }
  .msg { max-width: 80ch; padding: 8px 12px; border-radius: 10px; white-space: pre-wrap;
         border: 1px solid var(--line); }
  .user { align-self: flex-end; background: var(--user); }
  .assistant { align-self: flex-start; background: var(--bot); }
  .system { align-self: center; font-size: 13px; color: var(--muted); background: transparent; }
  .error { align-self: center; color: #b42318; border-color: #fda29b; background: #fef3f2; }
  .stats { font-size: 12px; color: var(--muted); margin-top: 4px; }
  form { display: flex; gap: 8px; padding: 12px 16px; border-top: 1px solid var(--line); background: #fff; }
  textarea { flex: 1; resize: vertical; min-height: 44px; font: inherit; padding: 8px; }
  button { font: inherit; padding: 0 16px; }
</style>
</head>
<body>
<header>
  <h1>hubzoo</h1>
  <span id="model">loading model list...</span>
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <label>top-p <input id="top_p" type="number" min="0.01" max="1" step="0.05" value="0.95"></label>
  <label>max tokens <input id="max_tokens" type="number" min="1" step="1" value="256"></label>
  <label>system <input id="system" type="text" placeholder="optional system message"></label>
  <label>API key <input id="api_key" type="password" autocomplete="off"></label>
  <button id="reset" type="button">New chat</button>
</header>
<main id="log" aria-live="polite"></main>
<form id="form">
  <textarea id="input" placeholder="Message (Enter sends, Shift+Enter: new line)" required></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const log = $("log");
let messages = [];
let modelId = null;
let controller = null;

$("api_key").value = localStorage.getItem("hubzoo_api_key") || "";
$("api_key").addEventListener("change", () => localStorage.setItem("hubzoo_api_key", $("api_key").value));

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api_key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function add(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
  return div;
}

async function loadModels() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const j = await r.json();
    if (!r.ok) throw new Error(j.error ? j.error.message : r.statusText);
    modelId = j.data[0].id;
    $("model").textContent = modelId + " (context " + (j.data[0].max_model_len || "?") + " tokens)";
  } catch (e) {
    $("model").textContent = "model list unavailable: " + e.message;
  }
}

function number(id) {
  const v = parseFloat($(id).value);
  return Number.isFinite(v) ? v : undefined;
}

// Reads server-sent events from a fetch body; calls onData for each data line.
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (line.startsWith("data: ")) {
          if (onData(line.slice(6)) === false) return;
        }
      }
    }
  }
}

async function send(text) {
  const turn = messages.concat([{ role: "user", content: text }]);
  const system = $("system").value.trim();
  const request = {
    model: modelId || undefined,
    messages: (system ? [{ role: "system", content: system }] : []).concat(turn),
    stream: true,
    stream_options: { include_usage: true },
    temperature: number("temperature"),
    top_p: number("top_p"),
    max_tokens: Math.max(1, Math.round(number("max_tokens") || 256)),
  };
  add("user", text);
  const bubble = add("assistant", "");
  bubble.classList.add("streaming");
  let answer = "", usage = null, finish = null;
  const t0 = performance.now();
  controller = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(request), signal: controller.signal,
    });
    if (!r.ok) {
      let message = r.status + " " + r.statusText;
      try { const j = await r.json(); if (j.error) message = j.error.message; } catch (_) {}
      throw new Error(message);
    }
    await readEvents(r, (data) => {
      if (data === "[DONE]") return false;
      const j = JSON.parse(data);
      if (j.error) throw new Error(j.error.message);
      if (j.usage) usage = j.usage;
      for (const c of j.choices || []) {
        if (c.delta && c.delta.content) {
          answer += c.delta.content;
          bubble.textContent = answer;
          log.scrollTop = log.scrollHeight;
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    });
    messages = turn.concat([{ role: "assistant", content: answer }]);
    const seconds = (performance.now() - t0) / 1000;
    const stats = document.createElement("div");
    stats.className = "stats";
    stats.textContent = usage
      ? `${usage.completion_tokens} tokens in ${seconds.toFixed(1)} s (${(usage.completion_tokens / seconds).toFixed(1)} tok/s), prompt ${usage.prompt_tokens} tokens, finish: ${finish}`
      : `finish: ${finish}`;
    bubble.appendChild(stats);
  } catch (e) {
    if (e.name === "AbortError") {
      // The answer so far is kept in the page but not in the conversation.
      bubble.appendChild(Object.assign(document.createElement("div"), { className: "stats", textContent: "stopped" }));
    } else {
      bubble.remove();
      add("error", "Error: " + e.message);
    }
  } finally {
    bubble.classList.remove("streaming");
    bubble.classList.add("done");
    controller = null;
    $("send").disabled = false;
    $("stop").disabled = true;
  }
}

$("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("form").requestSubmit(); }
});
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("reset").addEventListener("click", () => {
  if (controller) controller.abort();
  messages = [];
  log.replaceChildren();
  add("system", "New conversation.");
});
loadModels();
</script>
</body>
</html>
)HTML";

}  // namespace hubzoo::server
