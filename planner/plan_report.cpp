#include "planner/plan_report.hpp"

#include <cstdio>
#include <string>

#include "planner/communication_time.hpp"
#include "planner/gradient_overlap.hpp"
#include "planner/memory_size.hpp"

namespace dflash {
namespace {

using nlohmann::json;

// 1234567 -> "1,234,567"
std::string grouped(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string padded(std::string s, std::size_t width, bool right = false) {
  if (s.size() >= width) return s;
  const std::string fill(width - s.size(), ' ');
  return right ? fill + s : s + fill;
}

void row(std::ostream& out, std::string_view label, std::int64_t bytes) {
  out << padded(std::string(label), 42) << padded(gib_string(bytes), 10, true) << padded(grouped(bytes), 20, true)
      << "\n";
}

json activation_json(const ActivationMemory& a) {
  return {{"values_per_token_per_layer", a.values_per_token_per_layer},
          {"all_layers_bytes", a.all_layers_bytes},
          {"residual_only_bytes", a.residual_only_bytes},
          {"checkpoint_every", a.checkpoint_every},
          {"boundary_bytes", a.boundary_bytes},
          {"live_segment_bytes", a.live_segment_bytes},
          {"checkpointed_bytes", a.checkpointed_bytes}};
}

json precision_json(const TrainingPrecision& p) {
  return {{"parameter_bytes", p.parameter_bytes},
          {"master_bytes", p.master_bytes},
          {"optimizer_state_bytes", p.optimizer_state_bytes},
          {"gradient_bytes", p.gradient_bytes},
          {"frozen_bytes", p.frozen_bytes},
          {"activation_bytes", p.activation_bytes},
          {"statistic_bytes", p.statistic_bytes},
          {"input_bytes", p.input_bytes},
          {"trunk", p.trunk == TrunkMemoryModel::cuda ? "cuda" : "reference"}};
}

json link_overlap_json(const LinkOverlap& l) {
  return {{"gradient_seconds", l.gradient_seconds},
          {"exposed_seconds", l.exposed_seconds},
          {"after_backward_seconds", l.after_backward_seconds},
          {"fits_in_backward", l.fits_in_backward}};
}

json overlap_json(const GradientOverlap& o) {
  return {{"peak_flops_per_second", kH200DenseBf16FlopsPerSecond},
          {"achieved_fraction_of_peak", kAchievedFractionOfPeak},
          {"achieved_flops_per_second", kAchievedFlopsPerSecond},
          {"window_flops", o.window_flops},
          {"window_seconds", o.window_seconds},
          {"step_backward_seconds", o.step_backward_seconds},
          {"buckets", o.buckets},
          {"nvlink", link_overlap_json(o.nvlink)},
          {"inter_node", link_overlap_json(o.inter_node)}};
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f s", s);
  return text;
}

void print_communication(std::ostream& out, const MemoryPlan& plan) {
  const PlanRequest& r = plan.request;
  const std::vector<CollectiveTime> collectives = step_communication(plan.parameters.trainable, r.precision, r.layout);
  if (collectives.empty()) return;
  out << "\ncommunication per GPU and step (" << r.layout.gpus << " GPUs, ZeRO-" << r.layout.zero_stage << "):\n";
  for (const CollectiveTime& c : collectives) {
    out << "  " << padded(c.collective, 26) << padded(gb_string(std::uint64_t(c.bus_bytes)), 10, true)
        << " on the bus   NVLink " << seconds_text(c.nvlink_seconds) << "   inter-node "
        << seconds_text(c.inter_node_seconds) << "\n";
  }
  const GradientOverlap o = gradient_overlap(r);
  char rate[160];
  std::snprintf(rate, sizeof rate, "%.3g FLOP at %.0f TFLOP/s (%.0f%% of the H200 dense bf16 peak)", o.window_flops,
                kAchievedFlopsPerSecond / 1e12, 100 * kAchievedFractionOfPeak);
  out << "backward the gradient sums can hide behind (the last sequence's trunk backward): " << rate << " = "
      << seconds_text(o.window_seconds) << "\n";
  const std::pair<const char*, const LinkOverlap*> links[] = {{"NVLink", &o.nvlink}, {"inter-node", &o.inter_node}};
  for (const auto& [name, l] : links) {
    out << "  " << padded(name, 12) << o.buckets << " buckets " << seconds_text(l->gradient_seconds)
        << (l->fits_in_backward ? " <= " : " > ") << "backward; exposed " << seconds_text(l->exposed_seconds);
    if (r.layout.zero_stage == 1) out << ", then the all-gather " << seconds_text(l->after_backward_seconds);
    out << "\n";
  }
}

}  // namespace

std::string verdict_text(const DeviceFit& f) {
  return f.fits ? "FITS, " + gib_string(f.free_bytes()) + " GiB to spare"
                : "DOES NOT FIT, " + gib_string(-f.free_bytes()) + " GiB over";
}

json plan_json(const MemoryPlan& plan, const std::vector<PolicyVerdict>& verdicts) {
  const PlanRequest& r = plan.request;
  json loss_saved = json::object(), loss_full = json::object();
  for (LossPolicy p : kAllLossPolicies) {
    const std::string name(loss_policy_name(p));
    loss_saved[name] = plan.loss_head.saved(p);
    const CategoryBytes full = loss_head_memory(plan.loss_head_shape, p);
    loss_full[name] = {{"loss_saved", full[PlanCategory::loss_saved]},
                       {"transient", full[PlanCategory::transient]},
                       {"gradients", full[PlanCategory::gradients]},
                       {"outputs", full[PlanCategory::outputs]}};
  }
  json collectives = json::array();
  double nvlink_seconds = 0, inter_node_seconds = 0;
  for (const CollectiveTime& t : step_communication(plan.parameters.trainable, r.precision, r.layout)) {
    collectives.push_back({{"collective", t.collective},
                           {"bytes", t.bytes},
                           {"bus_bytes", t.bus_bytes},
                           {"nvlink_seconds", t.nvlink_seconds},
                           {"inter_node_seconds", t.inter_node_seconds}});
    nvlink_seconds += t.nvlink_seconds;
    inter_node_seconds += t.inter_node_seconds;
  }
  json categories = json::object();
  for (PlanCategory c : kAllPlanCategories) categories[std::string(plan_category_name(c))] = plan.categories[c];
  json verdict_rows = json::array();
  for (const PolicyVerdict& v : verdicts) {
    verdict_rows.push_back({{"loss_policy", loss_policy_name(v.loss_policy)},
                            {"trunk_policy", trunk_policy_name(v.trunk_policy)},
                            {"zero", v.zero_stage},
                            {"total_bytes", v.total_bytes},
                            {"fits", v.fits}});
  }
  return {
      {"request",
       {{"tokens", r.tokens},
        {"context", r.context},
        {"sequences", r.sequences},
        {"micro_steps", r.micro_steps},
        {"loss_policy", loss_policy_name(r.loss_policy)},
        {"loss_chunk_rows", r.loss_chunk_rows},
        {"trunk_policy", trunk_policy_name(r.trunk_policy)},
        {"checkpoint_every", r.checkpoint_every},
        {"gpus", r.layout.gpus},
        {"zero", r.layout.zero_stage},
        {"bucket_bytes", r.layout.bucket_bytes},
        {"buckets_in_flight", r.layout.buckets_in_flight},
        {"precision", precision_json(r.precision)}}},
      {"parameters", {{"trainable", plan.parameters.trainable}, {"frozen", plan.parameters.frozen}}},
      {"loss_head",
       {{"full_logits_bytes", plan.loss_head.full_logits_bytes},
        {"chunk_logits_bytes", plan.loss_head.chunk_logits_bytes},
        {"saved_bytes", loss_saved},
        {"saved_input_bytes", plan.loss_head.saved_input_bytes},
        {"full_bytes", loss_full}}},
      {"activations", activation_json(plan.activations)},
      {"trunk",
       {{"saved_bytes", plan.trunk.saved_bytes},
        {"transient_bytes", plan.trunk.transient_bytes},
        {"feature_grad_bytes", plan.trunk.feature_grad_bytes}}},
      {"categories", categories},
      {"communication",
       {{"nvlink_bus_bytes_per_second", kNvlinkBusBytesPerSecond},
        {"inter_node_bus_bytes_per_second", kInterNodeBusBytesPerSecond},
        {"collectives", collectives},
        {"nvlink_seconds", nvlink_seconds},
        {"inter_node_seconds", inter_node_seconds},
        {"overlap", overlap_json(gradient_overlap(r))}}},
      {"total_bytes", plan.fit.total_bytes},
      {"device_bytes", plan.fit.device_bytes},
      {"headroom_bytes", plan.fit.headroom_bytes},
      {"usable_bytes", plan.fit.usable_bytes},
      {"fits", plan.fit.fits},
      {"verdicts", verdict_rows},
  };
}

void print_plan(std::ostream& out, const MemoryPlan& plan, const std::vector<PolicyVerdict>& verdicts) {
  const PlanRequest& r = plan.request;
  const TrainingPrecision& p = r.precision;
  out << "Memory plan per GPU: " << grouped(plan.parameters.trainable) << " trainable and "
      << grouped(plan.parameters.frozen) << " frozen parameters\n"
      << "  " << r.sequences << " sequence(s) of " << r.tokens << " block tokens (" << r.tokens / r.config.block_size
      << " blocks of " << r.config.block_size << "), context " << r.context << "\n"
      << "  loss head " << loss_policy_name(r.loss_policy) << " (chunks of " << r.loss_chunk_rows << " rows), trunk "
      << trunk_policy_name(r.trunk_policy) << " (k = " << r.checkpoint_every << "), " << r.layout.gpus
      << " GPU(s), ZeRO-" << r.layout.zero_stage << "\n"
      << "  bytes per element: weights " << p.parameter_bytes << ", master " << p.master_bytes << ", AdamW m+v "
      << p.optimizer_state_bytes << ", gradients " << p.gradient_bytes << ", activations " << p.activation_bytes
      << ", statistics " << p.statistic_bytes << "; trunk "
      << (p.trunk == TrunkMemoryModel::cuda ? "as cuda/trunk/stack.hpp allocates it" : "as the reference allocates it")
      << "\n\n";
  out << padded("category", 42) << padded("GiB", 10, true) << padded("bytes", 20, true) << "\n";
  for (PlanCategory c : kAllPlanCategories) row(out, plan_category_label(c), plan.categories[c]);
  row(out, "total", plan.fit.total_bytes);
  const DeviceFit& f = plan.fit;
  out << "device " << grouped(f.device_bytes) << " B = " << gib_string(f.device_bytes)
      << " GiB, headroom max(5%, 2 GiB) " << gib_string(f.headroom_bytes) << " GiB, usable "
      << gib_string(f.usable_bytes) << " GiB\n"
      << "verdict: " << verdict_text(f) << "\n";
  print_communication(out, plan);
  out << "\n";

  const LossHeadHeadline& h = plan.loss_head;
  out << "loss head (SPEC §8, big tensors): full logits " << gib_string(h.full_logits_bytes) << " GiB, one chunk "
      << gib_string(h.chunk_logits_bytes) << " GiB; kept for backward:";
  for (LossPolicy lp : kAllLossPolicies) out << " " << loss_policy_name(lp) << " " << gib_string(h.saved(lp));
  out << " GiB\n";
  const ActivationMemory& a = plan.activations;
  out << "trunk: " << grouped(a.values_per_token_per_layer) << " values per block token per layer; all "
      << r.config.num_hidden_layers << " layers kept " << gib_string(a.all_layers_bytes)
      << " GiB, residual stream alone " << gib_string(a.residual_only_bytes)
      << " GiB, every_k with k = " << a.checkpoint_every << " " << gib_string(a.checkpointed_bytes) << " GiB\n\n";

  out << "policy combinations (" << r.layout.gpus << " GPU(s), device " << gib_string(f.device_bytes) << " GiB):\n"
      << padded("loss policy", 24) << padded("trunk policy", 14) << padded("ZeRO-0 GiB", 12, true) << "  "
      << padded("verdict", 14) << padded("ZeRO-1 GiB", 12, true) << "  verdict\n";
  for (std::size_t i = 0; i + 1 < verdicts.size(); i += 2) {
    const PolicyVerdict& z0 = verdicts[i];
    const PolicyVerdict& z1 = verdicts[i + 1];
    out << padded(std::string(loss_policy_name(z0.loss_policy)), 24)
        << padded(std::string(trunk_policy_name(z0.trunk_policy)), 14) << padded(gib_string(z0.total_bytes), 12, true)
        << "  " << padded(z0.fits ? "fits" : "does not fit", 14) << padded(gib_string(z1.total_bytes), 12, true) << "  "
        << (z1.fits ? "fits" : "does not fit") << "\n";
  }
}

json host_memory_json(const HostMemoryPlan& h) {
  return {{"optimizer_part", h.optimizer_part},
          {"checkpoint_slice", h.checkpoint_slice},
          {"part_upload", h.part_upload},
          {"frozen_piece", h.frozen_piece},
          {"step_batch", h.step_batch},
          {"upload_staging", h.upload_staging},
          {"sequence_tables", h.sequence_tables},
          {"checkpoint_gather", h.checkpoint_gather},
          {"fresh_start", h.fresh_start()},
          {"resumed_start", h.resumed_start()},
          {"steps", h.steps()},
          {"checkpoint_write", h.checkpoint_write()},
          {"rank_peak", h.rank_peak()},
          {"lead_peak", h.lead_peak()},
          {"ranks_per_node", h.ranks_per_node},
          {"node_peak", h.node_peak()}};
}

void print_host_memory(std::ostream& out, const HostMemoryPlan& h) {
  out << "\nhost memory per rank (dflash train --backend cuda; planner/host_memory.hpp):\n";
  const std::pair<const char*, std::int64_t> phases[] = {
      {"fresh start (optimizer part, fp32 copy)", h.fresh_start()},
      {"resumed start (checkpoint slice, part)", h.resumed_start()},
      {"steps (its sequences, F and G in bf16)", h.steps()},
      {"checkpoint write (writing rank: m, v fp32)", h.checkpoint_write()},
      {"peak of a rank", h.rank_peak()},
      {"peak of the rank that writes checkpoints", h.lead_peak()},
  };
  for (const auto& [label, bytes] : phases) row(out, label, bytes);
  row(out, "node: " + std::to_string(h.ranks_per_node) + " rank(s) at their peaks", h.node_peak());
}

DecoderPlan plan_decoder(const DecoderConfig& config, std::int64_t tokens, std::int64_t checkpoint_every,
                         std::int64_t element_bytes) {
  return {config, tokens, element_bytes, decoder_layer_saved_tensors(config),
          decoder_activation_memory(config, tokens, checkpoint_every, element_bytes)};
}

json decoder_plan_json(const DecoderPlan& plan) {
  const DecoderConfig& c = plan.config;
  json tensors = json::array();
  for (const PerTokenTensor& t : plan.layer_tensors) {
    tensors.push_back({{"block", t.block}, {"name", t.name}, {"values_per_token", t.values_per_token}});
  }
  json activations = activation_json(plan.activations);
  activations["attention_values_per_token"] = values_per_token(plan.layer_tensors, kAttentionBlock);
  activations["mlp_values_per_token"] = values_per_token(plan.layer_tensors, kMlpBlock);
  activations["saved_tensors"] = tensors;
  return {{"decoder",
           {{"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_attention_heads", c.num_attention_heads},
            {"num_key_value_heads", c.num_key_value_heads},
            {"head_dim", c.head_dim},
            {"num_hidden_layers", c.num_hidden_layers},
            {"attn_output_gate", c.attn_output_gate}}},
          {"tokens", plan.tokens},
          {"element_bytes", plan.element_bytes},
          {"activations", activations}};
}

void print_decoder_plan(std::ostream& out, const DecoderPlan& plan) {
  const DecoderConfig& c = plan.config;
  const ActivationMemory& a = plan.activations;
  out << "Saved activations of a decoder stack: " << c.num_hidden_layers << " layers, H " << c.hidden_size << ", I "
      << c.intermediate_size << ", " << c.num_attention_heads << " heads / " << c.num_key_value_heads << " kv heads of "
      << c.head_dim << (c.attn_output_gate ? ", gated attention output" : "") << ", " << plan.tokens << " tokens, "
      << plan.element_bytes << " B per value\n\n"
      << padded("block", 11) << padded("tensor kept for backward", 40) << padded("values/token", 14, true) << "\n";
  for (const PerTokenTensor& t : plan.layer_tensors) {
    out << padded(std::string(t.block), 11) << padded(std::string(t.name), 40)
        << padded(grouped(t.values_per_token), 14, true) << "\n";
  }
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.1f", double(a.values_per_token_per_layer) / double(c.hidden_size));
  out << padded("", 11) << padded("per layer", 40) << padded(grouped(a.values_per_token_per_layer), 14, true) << "  ("
      << ratio << " x the residual width)\n\n";
  row(out, "all layers kept", a.all_layers_bytes);
  row(out, "residual stream alone", a.residual_only_bytes);
  row(out, "checkpoint boundaries (every " + std::to_string(a.checkpoint_every) + ")", a.boundary_bytes);
  row(out, "one live segment", a.live_segment_bytes);
  row(out, "checkpointed: boundaries + live segment", a.checkpointed_bytes);
}

}  // namespace dflash
