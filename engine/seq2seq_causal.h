// An encoder-decoder (models/seq2seq.h) behind the CausalLM interface, so
// the Scheduler's continuous batching, the server's /v1/completions and its
// streaming serve it as they serve a decoder.
//
// A slot's rows are its request's prompt (the encoder's input) and then its
// decoder tokens. Prompt rows are collected (a prompt may arrive in chunks);
// the row whose logits are wanted ends the prompt: the encoder runs over the
// whole prompt once (every prompt ending in a step in one ragged batch),
// start() computes the request's cross-attention keys/values, and the
// decoder's start token runs in the same step, giving the logits of the
// first new token. Later rows are decoder tokens; one decode() call runs the
// rows of every slot together, each with its own self-attention cache. Rows
// never see each other's states, so a request's tokens are the same alone or
// batched (batch invariance).
//
// The decoder states live in the adapter, one per slot; the KvCache the
// engine holds only tracks each slot's length (a slot cleared by the engine,
// or a row at position 0, starts a new request). Captures are not available
// through the adapter (use Seq2SeqLM directly).
#pragma once

#include <memory>
#include <string>

#include "models/causal_lm.h"
#include "models/seq2seq.h"

namespace hubzoo {

std::unique_ptr<CausalLM> seq2seq_as_causal_lm(std::unique_ptr<Seq2SeqLM> lm);

// Whether `model` (a snapshot folder or a repo id in the HF cache; not a
// GGUF file) is an encoder-decoder checkpoint.
bool is_seq2seq_model(const std::string& model, const std::string& gguf_file = "");

// What a server generates with: an encoder-decoder through the adapter, any
// other checkpoint through load_causal_lm.
std::unique_ptr<CausalLM> load_generation_lm(const std::string& model, const LoadOptions& options);

}  // namespace hubzoo
