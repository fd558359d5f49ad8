// The model that runs a set of host weights: the model class of their
// family over a backend, and the device memory such a model takes. Loading
// a checkpoint file into weights is store/load.hpp.
#pragma once

#include <cstddef>
#include <memory>

#include "bitrank/model/decoder.hpp"
#include "bitrank/model/projection.hpp"

namespace bitrank::model {

// The model class of w.config's family (LlamaModel or HybridModel) over
// `be`, with the projections named in `blr` as BLR layers (a compressed
// model); `stream`: its blocks streamed from host memory (streamed_weights.hpp);
// `form`: how it keeps its weights (decoder.hpp; LoadedWeights::form for a
// model that only runs inference). The host weights may be dropped once it
// is made: the model holds its own copy.
template <class T>
std::unique_ptr<DecoderModel<T>> make_model(Backend<T>& be, const HostWeights& w, const BlrProjections& blr = {},
                                            bool stream = false, WeightForm form = {});

// The bytes a resident model of w (with `blr`, in `form`) takes on a backend
// of T: every tensor it uploads (blocks, final norm, head; the untied
// embedding table stays on the host), before activations and the 256-byte
// alignment of each tensor in its block.
template <class T>
std::size_t model_device_bytes(const HostWeights& w, const BlrProjections& blr = {}, WeightForm form = {});

}  // namespace bitrank::model
