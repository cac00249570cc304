// Kernels of tests/golden/cpp/inputs/types.yaml: each folds its arguments into its result, so
// tests/test_cpp_types.py can check that every C++ binding carries its value through the
// dispatcher's boxed calling convention intact.
#include <cty/types.h>

#include <ATen/ops/zeros.h>

#include <sstream>
#include <string>

namespace cty {

at::Tensor tensors_cpu(const at::Tensor& a, at::Tensor& b, const std::optional<at::Tensor>& c,
                       at::TensorList d, const c10::List<std::optional<at::Tensor>>& e,
                       at::TensorList f) {
  b.add_(a);
  at::Tensor r = a.clone();
  if (c.has_value()) r.add_(*c);
  for (const at::Tensor& t : d) r.add_(t);
  for (const std::optional<at::Tensor>& t : e) {
    if (t.has_value()) r.add_(*t);
  }
  for (const at::Tensor& t : f) t.add_(1);
  return r;
}

int64_t ints_cpu(const at::Tensor& t, int64_t a, c10::SymInt b, at::IntArrayRef c,
                 c10::SymIntArrayRef d, at::IntArrayRef e, std::optional<int64_t> f,
                 at::OptionalIntArrayRef g, at::OptionalSymIntArrayRef h,
                 std::optional<c10::SymInt> i) {
  int64_t r = t.numel() + a + b.expect_int() + f.value_or(1000);
  for (int64_t x : c) r += 10 * x;
  for (const c10::SymInt& x : d) r += 100 * x.expect_int();
  for (int64_t x : e) r += 1000 * x;
  if (g.has_value()) for (int64_t x : *g) r += 10000 * x;
  if (h.has_value()) for (const c10::SymInt& x : *h) r += 100000 * x.expect_int();
  if (i.has_value()) r += 1000000 * i->expect_int();
  return r;
}

double floats_cpu(const at::Tensor& t, double a, std::optional<double> b, at::ArrayRef<double> c,
                  std::optional<at::ArrayRef<double>> d, const at::Scalar& e,
                  const std::optional<at::Scalar>& f, at::ArrayRef<at::Scalar> g) {
  double r = static_cast<double>(t.numel()) + a + b.value_or(0.5) + e.toDouble();
  for (double x : c) r += 10 * x;
  if (d.has_value()) for (double x : *d) r += 100 * x;
  if (f.has_value()) r += 1000 * f->toDouble();
  for (const at::Scalar& x : g) r += 10000 * x.toDouble();
  return r;
}

bool bools_cpu(const at::Tensor& t, bool a, std::optional<bool> b, std::array<bool, 3> c,
               const c10::List<bool>& d, c10::SymBool e) {
  // Parity of the true values, counting an absent b as true.
  bool r = t.numel() % 2 == 1;
  r ^= a;
  r ^= b.value_or(true);
  for (bool x : c) r ^= x;
  for (bool x : d) r ^= x;
  r ^= e.expect_true(__FILE__, __LINE__) ? true : false;
  return r;
}

std::string strings_cpu(const at::Tensor& t, c10::string_view a, std::optional<c10::string_view> b,
                        at::ArrayRef<c10::string_view> c, c10::string_view d) {
  std::ostringstream s;
  s << t.numel() << '|' << a << '|' << (b.has_value() ? std::string(*b) : "-") << '|';
  for (size_t i = 0; i < c.size(); ++i) s << (i ? "," : "") << c[i];
  s << '|' << d;
  return s.str();
}

std::tuple<at::ScalarType, std::string> enums_cpu(
    const at::Tensor& t, at::ScalarType a, std::optional<at::ScalarType> b, at::Layout c,
    std::optional<at::Layout> d, at::Device e, std::optional<at::Device> f, at::MemoryFormat g,
    std::optional<at::MemoryFormat> h, at::DeviceIndex i) {
  std::ostringstream s;
  s << t.numel() << '|' << a << '|' << (b.has_value() ? c10::toString(*b) : "-") << '|' << c
    << '|' << (d.has_value() ? c10::str(*d) : "-") << '|' << e << '|'
    << (f.has_value() ? f->str() : "-") << '|' << g << '|' << (h.has_value() ? c10::str(*h) : "-")
    << '|' << static_cast<int>(i);
  return std::make_tuple(b.value_or(a), s.str());
}

at::Tensor shim_enums_cpu(const at::Tensor& t, at::ScalarType a, std::optional<at::ScalarType> b,
                          at::Layout c, std::optional<at::Layout> d, at::Device e,
                          std::optional<at::Device> f, at::MemoryFormat g,
                          std::optional<at::MemoryFormat> h) {
  TORCH_CHECK(d.value_or(c) == at::kStrided, "shim_enums: layout ", d.value_or(c));
  return t.to(f.value_or(e), b.value_or(a)).contiguous(h.value_or(g));
}

std::string objects_cpu(const at::Tensor& t, std::optional<at::Generator> g, std::optional<at::Generator> h,
                        at::Stream s, at::Storage st) {
  std::ostringstream out;
  out << t.numel() << '|' << (g.has_value() ? "gen" : "-") << '|' << h->current_seed() << '|'
      << s.device() << '|' << st.nbytes();
  return out.str();
}

std::tuple<at::Tensor, std::vector<at::Tensor>, int64_t, double, bool, at::Scalar, c10::SymInt,
           std::vector<int64_t>, std::string>
returns_cpu(const at::Tensor& self) {
  return std::make_tuple(self.neg(), std::vector<at::Tensor>{self, self.mul(2)}, self.numel(),
                         0.25, true, at::Scalar(7), c10::SymInt(self.dim()), self.sizes().vec(),
                         std::string("done"));
}

at::Tensor fill_cpu(const at::Tensor& self, const at::Scalar& value) {
  return self.clone().fill_(value);
}

at::Tensor& fill_cpu_(at::Tensor& self, const at::Scalar& value) {
  return self.fill_(value);
}

std::tuple<at::Tensor, at::Tensor> split_cpu(const at::Tensor& self) {
  return std::make_tuple(self.clamp_max(0), self.clamp_min(0));
}

std::tuple<at::Tensor&, at::Tensor&> split_out_cpu(const at::Tensor& self, at::Tensor& lo,
                                                   at::Tensor& hi) {
  lo.resize_(self.sizes()).copy_(self.clamp_max(0));
  hi.resize_(self.sizes()).copy_(self.clamp_min(0));
  return std::tuple<at::Tensor&, at::Tensor&>(lo, hi);
}

void zero_all_cpu_(at::TensorList self) {
  for (const at::Tensor& t : self) t.zero_();
}

at::Tensor defaults_kernel(const at::Tensor& self, int64_t a, double b, bool c,
                           c10::string_view d, std::optional<at::ScalarType> e,
                           at::IntArrayRef f, at::Layout h, at::MemoryFormat m, at::ScalarType s,
                           const at::Scalar& t, double u, at::IntArrayRef v) {
  TORCH_CHECK(c && d == "mean" && !e.has_value() && f.empty() && h == at::kStrided &&
                  m == at::MemoryFormat::Contiguous && s == at::kLong && u == -1e-12 &&
                  v.size() == 2 && v[0] == 1 && v[1] == 2,
              "defaults arrived changed");
  return self.mul(static_cast<double>(a) * b * t.toDouble());
}

at::Tensor pick_int(const at::Tensor& self, int64_t index) {
  return self.select(0, index).clone();
}

at::Tensor pick_tensor(const at::Tensor& self, const at::Tensor& index) {
  return self.index_select(0, index);
}

at::Tensor composite_kernel(const at::Tensor& self, int64_t dim) {
  return self.sum(dim);
}

at::Tensor shared_kernel(const at::Tensor& self) {
  return self.neg();
}

std::vector<std::vector<int64_t>> nested_cpu(
    const at::Tensor& t, const std::vector<std::vector<int64_t>>& a,
    const std::vector<std::vector<c10::SymInt>>& b, const std::vector<std::vector<double>>& c,
    const std::vector<std::vector<bool>>& d, const std::vector<c10::List<std::string>>& e,
    const std::vector<std::vector<at::Tensor>>& f,
    const std::optional<std::vector<std::vector<int64_t>>>& g,
    const std::vector<std::optional<int64_t>>& h,
    const std::vector<std::optional<std::string>>& i) {
  // One row per argument, in order: what each nested value carried.
  std::vector<std::vector<int64_t>> r;
  std::vector<int64_t> row;
  for (const auto& v : a) row.push_back(static_cast<int64_t>(v.size()));
  r.push_back(row);
  row.clear();
  for (const auto& v : b) for (const c10::SymInt& x : v) row.push_back(x.expect_int());
  r.push_back(row);
  row.clear();
  for (const auto& v : c) for (double x : v) row.push_back(static_cast<int64_t>(x * 2));
  r.push_back(row);
  row.clear();
  for (const auto& v : d) for (bool x : v) row.push_back(x ? 1 : 0);
  r.push_back(row);
  row.clear();
  for (const auto& v : e) {
    for (const std::string& x : v) row.push_back(static_cast<int64_t>(x.size()));
  }
  r.push_back(row);
  row.clear();
  for (const auto& v : f) for (const at::Tensor& x : v) row.push_back(x.numel() + t.numel());
  r.push_back(row);
  r.push_back(g.has_value() ? (*g)[0] : std::vector<int64_t>{-1});
  row.clear();
  for (const auto& x : h) row.push_back(x.value_or(-1));
  r.push_back(row);
  row.clear();
  for (const auto& x : i) row.push_back(x.has_value() ? static_cast<int64_t>(x->size()) : -1);
  r.push_back(row);
  return r;
}

std::tuple<std::tuple<int64_t, std::string>> tuples_cpu(
    const at::Tensor& t,
    const std::vector<std::tuple<std::string, std::string, std::string>>& edge_types,
    const std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>>& mappings,
    const std::optional<std::tuple<int64_t, int64_t>>& group_shape) {
  std::string s;
  for (const auto& e : edge_types) {
    s += std::get<0>(e) + "-" + std::get<1>(e) + "-" + std::get<2>(e) + ";";
  }
  int64_t n = t.numel();
  if (mappings.has_value()) n += 10 * std::get<2>(*mappings).numel();
  if (group_shape.has_value()) n += 1000 * std::get<0>(*group_shape) + 100 * std::get<1>(*group_shape);
  return std::make_tuple(std::make_tuple(n, s));
}

std::tuple<std::optional<std::vector<at::Tensor>>, std::optional<int64_t>,
           std::optional<std::string>, std::optional<std::vector<int64_t>>,
           std::vector<std::optional<at::Tensor>>>
optional_returns_cpu(const at::Tensor& t, bool present) {
  if (!present) {
    return std::make_tuple(std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                           std::vector<std::optional<at::Tensor>>{std::nullopt});
  }
  return std::make_tuple(std::vector<at::Tensor>{t.neg(), t}, t.numel(), std::string("here"),
                         t.sizes().vec(), std::vector<std::optional<at::Tensor>>{t, std::nullopt});
}

std::tuple<at::Tensor, at::Tensor> step_cpu_(at::Tensor& self) {
  at::Tensor before = self.clone();
  self.add_(1);
  return std::make_tuple(self, before);
}

at::Tensor& scale_into_cpu(const at::Tensor& a, at::Tensor& out) {
  return out.copy_(a.mul(2));
}

std::string enum_numbers_cpu(const at::Tensor& t, at::ScalarType a, at::Layout b,
                             at::MemoryFormat c, at::ScalarType d) {
  std::ostringstream s;
  s << a << '|' << b << '|' << c << '|' << d << '|' << t.dim();
  return s.str();
}

void myadd_out_cpu(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  out.copy_(a.add(b));
}

void bang_cpu(const at::Tensor& a, at::Tensor& b, const std::optional<at::Tensor>& c,
              at::TensorList d, at::TensorList e, const std::optional<at::Tensor>& f) {
  b.add_(a);
  if (c.has_value()) c->add_(a);
  for (const at::Tensor& t : d) t.add_(1);
  for (const at::Tensor& t : e) b.add_(t);
  if (f.has_value()) b.add_(*f);
}

void bang_int_cpu(at::Tensor& out, std::optional<int64_t> n) { out.fill_(n.value_or(-1)); }

c10::Dict<std::string, at::Tensor> dicts_cpu(
    const at::Tensor& t, const c10::Dict<std::string, at::Tensor>& tensors,
    const c10::Dict<std::string, std::vector<int64_t>>& sizes) {
  c10::Dict<std::string, at::Tensor> out;
  for (const auto& e : tensors) out.insert(e.key(), e.value().add(t));
  for (const auto& e : sizes) {
    out.insert(e.key() + "_n", t.new_full({1}, static_cast<double>(e.value().size())));
  }
  return out;
}

}  // namespace cty
