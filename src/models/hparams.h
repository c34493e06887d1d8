// Reading decoder hyperparameters from GGUF metadata (`<arch>.*` keys), with llama.cpp's
// defaults for absent optional keys. Every value is range-checked; errors name the key.
#pragma once

#include "base/status.h"
#include "format/gguf.h"
#include "models/model.h"

namespace power {

// Fills every field of ModelHparams except rope_kind (the architecture decides) and n_vocab
// (taken from the token embedding). Rejects per-layer arrays of head counts and rope scaling
// types Power does not implement (yarn, longrope) with kUnsupported naming the key.
Result<ModelHparams> read_decoder_hparams(const GgufFile& file, const std::string& arch);

}  // namespace power
