// The drafter's analytic gradients against 50-digit central differences, and its double forward
// against the same forward in 50-digit arithmetic (SPEC §10), on random small configs with
// dropout on and off. Tiny shapes: a 50-digit forward costs about a microsecond per multiply-add.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "common/tolerances.hpp"
#include "properties/reference/drafter_cases.hpp"
#include "reference/drafter_compare.hpp"
#include "reference/drafter_gradient_check.hpp"

namespace dflash {
namespace {

// One random direction per trainable tensor and one for dL/dF (two 50-digit forwards each), plus
// three single coordinates: relative error <= 1e-9 (SPEC §10). Dropout masks are a fixed
// function of their coordinates, so the check holds with dropout on as well.
RC_GTEST_PROP(DrafterGradients, AnalyticGradientsEqualFiftyDigitCentralDifferences, ()) {
  const DrafterCase c = *gen_drafter_case();
  DrafterProblem p(c);
  const DrafterStepResult<double> r = p.step(c, c.options);
  const GradientCheck check = check_drafter_gradients(c.config, p.params, p.frozen, p.batch, c.options, r,
                                                      {.seed = c.parameter_seed, .coordinates = 3});
  RC_LOG() << "worst " << check.worst << " at " << check.worst_what << " over " << check.evaluations
           << " differences; loss " << r.outputs.stats.loss << "\n";
  RC_ASSERT(check.worst <= kFiniteDifferenceTolerance);
}

// The double forward (loss, ce, kl, Y, lse, token losses) within 1e-12 of the 50-digit one.
RC_GTEST_PROP(DrafterGradients, DoubleForwardEqualsFiftyDigitForward, ()) {
  const DrafterCase c = *gen_drafter_case();
  DrafterProblem p(c);
  const DrafterOutputs<double> d = drafter_forward(p.tracker, c.config, p.params, p.frozen, p.batch, c.options);
  MemoryTracker t;
  const DrafterOutputs<Mp50> exact =
      drafter_forward(t, c.config, convert_parameters<Mp50>(t, p.params), convert_frozen<Mp50>(t, p.frozen),
                      convert_batch<Mp50>(t, p.batch), c.options);
  const double error = drafter_outputs_error(d, exact);
  RC_LOG() << "error " << error << "\n";
  RC_ASSERT(error <= kReferenceTolerance);
}

}  // namespace
}  // namespace dflash
