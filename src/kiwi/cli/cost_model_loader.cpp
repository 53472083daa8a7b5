#include "kiwi/cli/cost_model_loader.h"

#include <fmt/format.h>

#include <utility>

#include "kiwi/cost/step_op_calibration.h"
#include "kiwi/models/presets.h"

namespace kiwi::cli {
namespace {

// kiwi's IR of the model the reference pass ran: the distributed runtime's GPT has no dropout, and the
// pass has no optimizer step (CalibratedStepOpSeconds leaves the IR's out).
Result<ir::Graph> ReferenceGraph(const cost::ReferenceStep& step) {
  models::ModelOverrides sizes;
  sizes.layers = step.layers;
  sizes.hidden = step.hidden;
  sizes.heads = step.heads;
  sizes.seq = step.seq;
  sizes.batch = step.batch;
  sizes.vocab = step.vocab;
  sizes.dtype = ir::DType::kF32;
  sizes.dropout = 0.0;
  Result<models::ModelSpec> spec = models::LoadModel(step.model, sizes);
  if (!spec) return spec.error();
  return models::BuildTrainingGraph(*spec);
}

}  // namespace

Result<cost::CostModel> MakeCostModel(const cost::Cluster& cluster, const cost::CostModelOptions& options,
                                      cost::Profile profile, const std::string& source) {
  const cost::DeviceProfile& device = profile.device;
  if (device.op_seconds && device.overhead == cost::OverheadKind::kAdditive) {
    profile.device.step_op_seconds = *device.op_seconds;  // given: the reference pass is not the executor
  } else if (device.reference_step && device.overhead == cost::OverheadKind::kAdditive) {
    const auto bad = [&](const Error& e) {
      return BadInput(fmt::format("{}: device.reference_step: {}", source, e.message));
    };
    Result<ir::Graph> reference = ReferenceGraph(*device.reference_step);
    if (!reference) return bad(reference.error());
    const cost::CostModel uncalibrated(cluster.device, options, profile);
    Result<double> per_op = cost::CalibratedStepOpSeconds(*reference, device.reference_step->seconds, uncalibrated);
    if (!per_op) return bad(per_op.error());
    profile.device.step_op_seconds = *per_op;
  }
  return cost::CostModel(cluster.device, options, std::move(profile));
}

}  // namespace kiwi::cli
