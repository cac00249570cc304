// A libtorch program with no Python in the process: loads the example library (linked), calls
// its ops on tensors that require grad, runs backward, and checks the gradients against central
// finite differences (tests/test_libtorch.py builds and runs it).

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/generated/variable_factories.h>

#include <cstdio>
#include <functional>
#include <vector>

namespace {

using Fn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

// Sum of the output times fixed weights, so every element's gradient is checked.
double loss(const Fn& f, const std::vector<at::Tensor>& xs, const at::Tensor& w) {
  at::NoGradGuard no_grad;
  return (f(xs) * w).sum().item<double>();
}

int check(const char* name, const Fn& f, std::vector<at::Tensor> xs) {
  for (auto& x : xs) {
    x.set_requires_grad(true);
  }
  auto out = f(xs);
  auto w = at::rand_like(out);
  auto grads = torch::autograd::grad({(out * w).sum()}, xs);
  const double eps = 1e-6;
  int failures = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    auto flat = xs[i].detach().view(-1);
    for (int64_t k = 0; k < flat.numel(); ++k) {
      std::vector<at::Tensor> up, down;
      for (size_t j = 0; j < xs.size(); ++j) {
        up.push_back(xs[j].detach().clone());
        down.push_back(xs[j].detach().clone());
      }
      up[i].view(-1)[k] += eps;
      down[i].view(-1)[k] -= eps;
      double numeric = (loss(f, up, w) - loss(f, down, w)) / (2 * eps);
      double analytic = grads[i].view(-1)[k].item<double>();
      if (std::abs(numeric - analytic) > 1e-5 * (1 + std::abs(numeric))) {
        std::printf("%s: input %zu element %lld: analytic %g, numeric %g\n", name, i,
                    static_cast<long long>(k), analytic, numeric);
        ++failures;
      }
    }
  }
  std::printf("%s: %s\n", name, failures ? "FAILED" : "ok");
  return failures;
}

template <typename Sig>
c10::TypedOperatorHandle<Sig> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

}  // namespace

int main() {
  at::manual_seed(0);
  auto opts = at::TensorOptions().dtype(at::kDouble);
  auto scaled_add = op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Scalar&)>(
      "exops::scaled_add");
  auto smooth_clamp = op<at::Tensor(const at::Tensor&, double)>("exops::smooth_clamp");
  auto weighted_sum = op<at::Tensor(at::TensorList, at::ArrayRef<double>)>("exops::weighted_sum");
  int failures = 0;
  failures += check("scaled_add", [&](const std::vector<at::Tensor>& x) {
    return scaled_add.call(x[0], x[1], 2.5);
  }, {at::randn({3, 4}, opts), at::randn({4}, opts)});
  failures += check("smooth_clamp", [&](const std::vector<at::Tensor>& x) {
    return smooth_clamp.call(x[0], 2.0);
  }, {at::randn({5, 5}, opts) * 3});
  failures += check("weighted_sum", [&](const std::vector<at::Tensor>& x) {
    return weighted_sum.call({x[0], x[1]}, {0.5, -1.5});
  }, {at::randn({3, 4}, opts), at::randn({3, 1}, opts)});
  // Double backward: the gradient of smooth_clamp is differentiable (smooth_clamp_backward has
  // formulas of its own).
  auto x = (at::randn({4}, opts)).set_requires_grad(true);
  auto g = torch::autograd::grad({smooth_clamp.call(x, 2.0).sum()}, {x}, {}, std::nullopt,
                                 /*create_graph=*/true)[0];
  auto gg = torch::autograd::grad({g.sum()}, {x})[0];
  auto t = at::tanh(x.detach() / 2.0);
  auto expected = -2.0 / 2.0 * t * (1 - t * t);
  bool second = at::allclose(gg, expected, 1e-7, 1e-9);
  std::printf("smooth_clamp double backward: %s\n", second ? "ok" : "FAILED");
  failures += second ? 0 : 1;
  return failures == 0 ? 0 : 1;
}
