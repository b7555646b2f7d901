// Typed errors raised at the edges of user input (files, configs, requests).
// Every message names what is wrong: the file, tensor or field.
#pragma once

#include <stdexcept>
#include <string>

namespace hubzoo {

// Base of every error hubzoo raises on bad input. Library code never aborts.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A file could not be opened, read or mapped (missing shard, permission).
struct FileError : Error {
  using Error::Error;
};

// A file's contents are malformed (safetensors header, JSON syntax, offsets).
struct FormatError : Error {
  using Error::Error;
};

// config.json names something unknown, unsupported or inconsistent.
struct ConfigError : Error {
  using Error::Error;
};

// Checkpoint tensors do not match what the config implies (missing, extra,
// wrong shape or dtype).
struct TensorMappingError : Error {
  using Error::Error;
};

// A model reference (repo id, revision) could not be resolved to a snapshot.
struct NotFoundError : Error {
  using Error::Error;
};

// An argument from the caller is out of range (token id, shape, option).
struct InvalidArgument : Error {
  using Error::Error;
};

}  // namespace hubzoo
