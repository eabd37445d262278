#include "engine/preset_common.h"

#include <algorithm>

#include "util/int_math.h"

namespace reshard::internal {

namespace {

Dims RowBox(const HfTensor& w, int64_t rows) {
  Dims shape = w.shape;
  shape[0] = rows;
  return shape;
}

Dims RowOffset(const HfTensor& w, int64_t row0) {
  Dims offset(w.shape.size(), 0);
  offset[0] = row0;
  return offset;
}

}  // namespace

std::string PresetWriter::ScaleName(const std::string& name) const {
  constexpr std::string_view kWeight = "weight";
  return name.substr(0, name.size() - kWeight.size()) + "weight_scale_inv";
}

const HfTensor* PresetWriter::Find(const std::string& name) const {
  const HfTensor* t = canon_.Find(name);
  if (t == nullptr) missed_ = name;
  return t;
}

Status PresetWriter::Missing(const std::string& name) const {
  return Status::InvalidArgument(label_ + " needs tensor " + name +
                                 ", which the checkpoint lacks");
}

Result<const HfTensor*> PresetWriter::Get(const std::string& name) const {
  const HfTensor* t = canon_.Find(name);
  if (t == nullptr) return Missing(name);
  return t;
}

Status PresetWriter::Whole(const std::string& name, const std::string& hf,
                           const TensorAxes& axes) {
  RESHARD_ASSIGN_OR_RETURN(const HfTensor* w, Get(hf));
  return Rows(name, {{w, axes, 0, w->shape[0]}});
}

Status PresetWriter::Fp8Rows(const std::string& name, const RowSlice& s,
                             bool last_of_whole) const {
  const int64_t bn = c_.block_rows;
  const bool ends = s.row0 + s.rows == s.w->shape[0];
  if (s.row0 % bn == 0 && (s.rows % bn == 0 || (ends && last_of_whole))) {
    return Status::OK();
  }
  return Status::InvalidArgument(
      label_ + " refuses block-FP8 parameter " + name + ": it holds rows [" +
      std::to_string(s.row0) + ", " + std::to_string(s.row0 + s.rows) +
      ") of " + s.w->name + ", not whole " + std::to_string(bn) +
      "-row blocks of its weight_scale_inv");
}

Result<std::vector<RowSlice>> PresetWriter::ScaleSlices(
    const std::string& name, const std::vector<RowSlice>& slices) const {
  std::vector<RowSlice> out;
  size_t quantized = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const RowSlice& s = slices[i];
    const HfTensor* scale = canon_.ScaleOf(s.w->name);
    if (scale == nullptr) continue;
    ++quantized;
    RESHARD_RETURN_NOT_OK(Fp8Rows(name, s, i + 1 == slices.size()));
    const int64_t bn = c_.block_rows;
    const int64_t r0 = s.row0 / bn;
    out.push_back({scale, s.axes, r0, CeilDiv(s.row0 + s.rows, bn) - r0});
  }
  if (quantized != 0 && quantized != slices.size()) {
    return Status::InvalidArgument(
        label_ + " parameter " + name +
        " fuses block-FP8 and unquantized weights (" + slices[0].w->name +
        "...): quantize all of them or none");
  }
  return out;
}

Status PresetWriter::Rows(const std::string& name,
                          const std::vector<RowSlice>& slices,
                          bool with_scales) {
  for (const RowSlice& s : slices) {
    if (s.w == nullptr) return Missing(missed_);
  }
  Dims shape = RowBox(*slices[0].w, 0);
  for (const RowSlice& s : slices) shape[0] += s.rows;
  b_->Begin(rank_, name, shape);
  for (const RowSlice& s : slices) {
    RESHARD_RETURN_NOT_OK(
        b_->Piece(*s.w, s.axes, RowOffset(*s.w, s.row0), RowBox(*s.w, s.rows)));
  }
  RESHARD_RETURN_NOT_OK(b_->End());
  if (!with_scales || slices[0].w->shape.size() != 2) return Status::OK();
  RESHARD_ASSIGN_OR_RETURN(auto scales, ScaleSlices(name, slices));
  if (scales.empty()) return Status::OK();
  return Rows(ScaleName(name), scales, false);
}

Status PresetWriter::Cols(const std::string& name, const std::string& hf,
                          const TensorAxes& axes, int64_t col0, int64_t cols) {
  return StackedCols(name, {hf}, axes, col0, cols);
}

Status PresetWriter::StackedCols(const std::string& name,
                                 const std::vector<std::string>& hf,
                                 const TensorAxes& axes, int64_t col0,
                                 int64_t cols, Emit emit, bool none) {
  std::vector<const HfTensor*> ws;
  for (const std::string& n : hf) {
    RESHARD_ASSIGN_OR_RETURN(const HfTensor* w, Get(n));
    ws.push_back(w);
  }
  const int64_t rows = ws[0]->shape[0];
  Dims shape = {rows, cols};
  if (none || hf.size() > 1 || name.find("w2_weight") != std::string::npos) {
    shape.insert(shape.begin(), none ? 0 : static_cast<int64_t>(hf.size()));
  }
  if (none && emit != kScale) {
    RESHARD_RETURN_NOT_OK(b_->Empty(rank_, name, shape, *ws[0]));
  } else if (emit != kScale) {
    b_->Begin(rank_, name, shape);
    for (const HfTensor* w : ws) {
      RESHARD_RETURN_NOT_OK(b_->Piece(*w, axes, {0, col0}, {rows, cols}));
    }
    RESHARD_RETURN_NOT_OK(b_->End());
  }
  if (emit == kWeight || canon_.ScaleOf(ws[0]->name) == nullptr) {
    return Status::OK();
  }
  const int64_t bk = c_.block_cols, bn = c_.block_rows;
  const int64_t total = ws[0]->shape[1];
  if (col0 % bk != 0 || (cols % bk != 0 && col0 + cols != total)) {
    return Status::InvalidArgument(
        label_ + " refuses block-FP8 parameter " + name +
        ": it holds columns [" + std::to_string(col0) + ", " +
        std::to_string(col0 + cols) + ") of " + ws[0]->name + ", not whole " +
        std::to_string(bk) + "-column blocks of its weight_scale_inv");
  }
  const int64_t s0 = col0 / bk, sn = CeilDiv(col0 + cols, bk) - s0;
  Dims sshape = shape;
  sshape[sshape.size() - 2] = CeilDiv(rows, bn);
  sshape[sshape.size() - 1] = sn;
  if (none) {
    return b_->Empty(rank_, ScaleName(name), sshape,
                     *canon_.ScaleOf(ws[0]->name));
  }
  b_->Begin(rank_, ScaleName(name), sshape);
  for (const HfTensor* w : ws) {
    const HfTensor* scale = canon_.ScaleOf(w->name);
    if (scale == nullptr) {
      return Status::InvalidArgument(label_ + " parameter " + name +
                                     " stacks block-FP8 and unquantized "
                                     "weights (" +
                                     w->name + ")");
    }
    RESHARD_RETURN_NOT_OK(
        b_->Piece(*scale, axes, {0, s0}, {scale->shape[0], sn}));
  }
  return b_->End();
}

Status PresetWriter::StackedRows(
    const std::string& name, int64_t experts,
    const std::vector<std::vector<RowSlice>>& slices, Emit emit) {
  for (const auto& expert : slices) {
    for (const RowSlice& s : expert) {
      if (s.w == nullptr) return Missing(missed_);
    }
  }
  const HfTensor& w0 = *slices[0][0].w;
  Dims shape = {experts, 0, w0.shape[1]};
  for (const RowSlice& s : slices[0]) shape[1] += s.rows;
  // No experts: slices[0] is a template for the per-expert shape only.
  if (experts == 0 && emit != kScale) {
    RESHARD_RETURN_NOT_OK(b_->Empty(rank_, name, shape, w0));
  } else if (emit != kScale) {
    b_->Begin(rank_, name, shape);
    for (const auto& expert : slices) {
      for (const RowSlice& s : expert) {
        RESHARD_RETURN_NOT_OK(b_->Piece(*s.w, s.axes, RowOffset(*s.w, s.row0),
                                        RowBox(*s.w, s.rows)));
      }
    }
    RESHARD_RETURN_NOT_OK(b_->End());
  }
  if (emit == kWeight) return Status::OK();
  std::vector<std::vector<RowSlice>> scales;
  for (const auto& expert : slices) {
    RESHARD_ASSIGN_OR_RETURN(auto s, ScaleSlices(name, expert));
    if (s.empty()) return Status::OK();
    scales.push_back(std::move(s));
  }
  Dims sshape = {experts, 0, scales[0][0].w->shape[1]};
  for (const RowSlice& s : scales[0]) sshape[1] += s.rows;
  if (experts == 0) {
    return b_->Empty(rank_, ScaleName(name), sshape, *scales[0][0].w);
  }
  b_->Begin(rank_, ScaleName(name), sshape);
  for (const auto& expert : scales) {
    for (const RowSlice& s : expert) {
      RESHARD_RETURN_NOT_OK(b_->Piece(*s.w, s.axes, RowOffset(*s.w, s.row0),
                                      RowBox(*s.w, s.rows)));
    }
  }
  return b_->End();
}

Status PresetWriter::FusedExperts(const std::string& w13, const std::string& w2,
                                  const std::string& x, int64_t first,
                                  int64_t count, int64_t row0, int64_t il,
                                  bool tp_split, bool stacked, bool over_dp) {
  RESHARD_ASSIGN_OR_RETURN(const HfTensor* gate_up, Get(x + "gate_up_proj"));
  RESHARD_ASSIGN_OR_RETURN(const HfTensor* down, Get(x + "down_proj"));
  if (c_.fp8 || c_.fp8_channel) {
    return Status::Unimplemented(
        label_ + " does not lay out the fused experts (" + gate_up->name +
        ", down_proj) of an FP8 model: the engine holds FP8 experts with "
        "their scales, which the fused form does not carry; use a "
        "checkpoint with one tensor per expert");
  }
  const int64_t h = gate_up->shape[2], i = gate_up->shape[1] / 2;
  using Ep = TensorAxes::Ep;
  TensorAxes rows{tp_split ? 1 : -1, 0, true, Ep::kSplit};
  TensorAxes cols{tp_split ? 2 : -1, 0, true, Ep::kSplit};
  rows.tp_over_dp = cols.tp_over_dp = tp_split && over_dp;
  const bool whole = row0 == 0 && il == i;
  if (count == 0) {  // an EP rank without experts
    RESHARD_RETURN_NOT_OK(b_->Empty(rank_, w13, {0, 2 * il, h}, *gate_up));
    return b_->Empty(rank_, w2, {0, h, il}, *down);
  }
  b_->Begin(rank_, w13, stacked ? Dims{count, 2 * il, h} : Dims{2 * il, h});
  if (whole) {  // the experts' gate and up rows are one box
    RESHARD_RETURN_NOT_OK(
        b_->Piece(*gate_up, rows, {first, 0, 0}, {count, 2 * i, h}));
  } else {
    for (int64_t j = first; j < first + count; ++j) {
      for (int64_t section : {int64_t{0}, i}) {
        RESHARD_RETURN_NOT_OK(
            b_->Piece(*gate_up, rows, {j, section + row0, 0}, {1, il, h}));
      }
    }
  }
  RESHARD_RETURN_NOT_OK(b_->End());
  b_->Begin(rank_, w2, stacked ? Dims{count, h, il} : Dims{h, il});
  if (whole) {
    RESHARD_RETURN_NOT_OK(b_->Piece(*down, cols, {first, 0, 0}, {count, h, i}));
  } else {
    for (int64_t j = first; j < first + count; ++j) {
      RESHARD_RETURN_NOT_OK(b_->Piece(*down, cols, {j, 0, row0}, {1, h, il}));
    }
  }
  return b_->End();
}

Status PresetWriter::Vocab(const std::string& name, const std::string& hf,
                           const TensorAxes& axes, int64_t row0,
                           int64_t chunk) {
  RESHARD_ASSIGN_OR_RETURN(const HfTensor* w, Get(hf));
  // The ranks that hold real rows; the placement's TP split spans them only
  // when padding leaves the last ranks without one (a partial split).
  TensorAxes held = axes;
  held.tp_ranks = CeilDiv(w->shape[0], chunk);
  const int64_t rows = std::min(chunk, w->shape[0] - row0);
  if (rows <= 0) return b_->Padding(rank_, name, {chunk, w->shape[1]}, *w);
  b_->Begin(rank_, name, {chunk, w->shape[1]});
  RESHARD_RETURN_NOT_OK(
      b_->Piece(*w, held, RowOffset(*w, row0), RowBox(*w, rows)));
  b_->PadRows(chunk - rows);
  return b_->End();
}

int64_t VllmEpRank(const ParallelSizes& n, int64_t d, int64_t t) {
  return n.ep > 1 ? d * n.tp + t : 0;
}

std::pair<int64_t, int64_t> VllmStageLayers(int64_t layers, int64_t pp,
                                            int64_t p) {
  std::vector<int64_t> parts(static_cast<size_t>(pp), layers / pp);
  const int64_t rem = layers % pp;
  for (int64_t i = 2; i < rem + 2; ++i) {
    ++parts[static_cast<size_t>(pp - i)];
  }
  int64_t lo = 0;
  for (int64_t i = 0; i < p; ++i) lo += parts[static_cast<size_t>(i)];
  return {lo, lo + parts[static_cast<size_t>(p)]};
}

Result<int64_t> VocabChunk(std::string_view engine, const std::string& tensor,
                           int64_t vocab, int64_t multiple, int64_t tp,
                           const std::string& how, PaddingRanks padding_ranks) {
  const int64_t padded = CeilDiv(vocab, multiple) * multiple;
  const std::string head =
      std::string(engine) + " cannot split the vocabulary of " + tensor +
      " over TP " + std::to_string(tp) + ": " + std::to_string(vocab) +
      " rows padded to " + std::to_string(padded) + how;
  if (padded % tp != 0) {
    return Status::InvalidArgument(head + " do not divide by TP");
  }
  const int64_t chunk = padded / tp;
  if (padding_ranks == PaddingRanks::kRefuse && (tp - 1) * chunk >= vocab) {
    return Status::InvalidArgument(head + " give each rank " +
                                   std::to_string(chunk) + " rows and rank " +
                                   std::to_string(tp - 1) + " only padding");
  }
  return chunk;
}

Status Divisible(std::string_view engine, std::string_view by_name, int64_t by,
                 std::string_view what, int64_t value) {
  if (by > 0 && value % by == 0) return Status::OK();
  return Status::InvalidArgument(
      std::string(engine) + " refuses " + std::string(by_name) + " " +
      std::to_string(by) + ": " + std::string(what) + " = " +
      std::to_string(value) + " is not divisible by " + std::to_string(by));
}

Status CheckFusedExpertsGrid(std::string_view engine, const HfConfig& c,
                             const ParallelSizes& n) {
  if (!(c.fused_experts || c.fused_mtp_experts) || n.ep == 1 || n.ep == n.tp) {
    return Status::OK();
  }
  return Status::Unimplemented(
      std::string(engine) + " does not lay out the fused experts " +
      "(mlp.experts.gate_up_proj, down_proj) of " + c.architecture + " at EP " +
      std::to_string(n.ep) + " over TP " + std::to_string(n.tp) + " x DP " +
      std::to_string(n.dp) +
      ": only EP 1 or EP = TP; use a checkpoint with one tensor per expert");
}

Result<bool> VllmSequenceParallelMoe(std::string_view engine,
                                     const EngineLayoutOptions& options) {
  using Spm = EngineLayoutOptions::SequenceParallelMoe;
  const ParallelSizes& n = options.sizes;
  const bool rule = n.ep > 1 && n.tp > 1 && n.dp > 1;
  switch (options.sequence_parallel_moe) {
    case Spm::kOff:
      return false;
    case Spm::kAuto:
      return rule;
    case Spm::kOn:
      break;
  }
  if (!rule) {
    return Status::InvalidArgument(
        std::string(engine) +
        " runs sequence-parallel MoE only with expert parallelism, TP > 1 "
        "and DP > 1, not at TP " +
        std::to_string(n.tp) + ", DP " + std::to_string(n.dp) + ", EP " +
        std::to_string(n.ep) + " (--sequence-parallel-moe on)");
  }
  return true;
}

Status CheckArchitecture(const HfConfig& config,
                         const EngineLayoutOptions& options,
                         std::initializer_list<HfArch> supported) {
  for (HfArch a : supported) {
    if (a == config.arch) return Status::OK();
  }
  return Status::Unimplemented("engine preset " + options.engine +
                               " does not lay out " + config.architecture);
}

Result<EngineLayout> BuildRanks(
    const std::vector<GridRank>& ranks, EngineBuilder* builder,
    PresetWriter* writer, const std::function<Status(const GridRank&)>& rank,
    const HfConfig& config, const EngineLayoutOptions& options) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    writer->SetRank(i);
    RESHARD_RETURN_NOT_OK(rank(ranks[i]));
  }
  return builder->Build(config, options);
}

}  // namespace reshard::internal
