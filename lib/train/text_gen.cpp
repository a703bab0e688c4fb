// text_gen.cpp — next-token logits on any engine, probabilities and the sampler (text_gen.h).
#include "train/text_gen.h"

#include <algorithm>
#include <numeric>

#include "gr_math.h"
#include "io/errors.h"
#include "spec/random.h"
#include "spec/text_data.h"
#include "train/device_runner.h"

namespace gr {

NextToken::NextToken(Model& model, const Vocab& vocab, std::unique_ptr<device::Backend> backend, FuseMode fuse)
    : model_(model), vocab_(vocab) {
  const Program& p = model.program();
  Preprocessing none;
  target_ = predict_target(p, none);
  target_.transform = "none", target_.classifier = false, target_.units = {};
  const Shape& shape = p.nodes[static_cast<size_t>(target_.node)].shape;
  const int64_t T = vocab.context, V = static_cast<int64_t>(vocab.tokens.size());
  if (shape.numel() != p.batch * T * V)
    throw InputError(model.spec().path, model.spec().predict.output.empty() ? model.spec().loss_pointer : model.spec().predict.pointer,
                     "node \"" + target_.name + "\" has shape " + shape.str() + "; next-token logits need [batch, " +
                         std::to_string(T) + ", " + std::to_string(V) + "] (context × vocabulary)" +
                         (T == 1 ? " or [batch, " + std::to_string(V) + "]" : ""));
  // The table of one batch: every row the same context (rows are independent; row 0 is read).
  table_.rows = p.batch;
  table_.names = {model.spec().data->inputs[0].name, model.spec().data->inputs[1].name};
  table_.tensors = {Tensor(Shape{p.batch, T}), Tensor(Shape{p.batch, T})};
  if (backend) {
    opt_ = std::make_unique<Optimizer>(model.make_optimizer());  // the runner captures a training episode; only its forward runs
    runner_ = std::make_unique<DeviceRunner>(model, *opt_, std::move(backend), model.real(), fuse);
    std::vector<int64_t> rows(static_cast<size_t>(p.batch), 0);
    out_ = model.record(model.data().train, rows)[static_cast<size_t>(target_.node)];  // the captured episode's ids
    model.reset();
    runner_->episode().set_dropout_key({});  // not training: dropout is the identity
  }
}

NextToken::~NextToken() = default;

std::vector<double> NextToken::logits(const std::vector<int64_t>& ids) {
  const int64_t T = vocab_.context, V = static_cast<int64_t>(vocab_.tokens.size()), batch = table_.rows;
  const int64_t n = std::min<int64_t>(T, static_cast<int64_t>(ids.size()));
  const size_t first = ids.size() - static_cast<size_t>(n);
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t t = 0; t < T; ++t)
      table_.tensors[0][r * T + t] = t < n ? static_cast<double>(ids[first + static_cast<size_t>(t)]) : 0.0;
  std::vector<int64_t> rows(static_cast<size_t>(batch));
  std::iota(rows.begin(), rows.end(), int64_t{0});
  const int64_t at = (n - 1) * V;  // the last real position of row 0
  if (!runner_) {
    const Predictions p = predict_rows(model_, target_, table_, batch);
    return std::vector<double>(p.values.begin() + at, p.values.begin() + at + V);
  }
  runner_->upload_batch(table_, rows);
  runner_->episode().forward();
  std::vector<double> buf(static_cast<size_t>(batch * T * V));
  runner_->episode().value(out_, buf);
  return std::vector<double>(buf.begin() + at, buf.begin() + at + V);
}

std::vector<double> next_token_probabilities(const std::vector<double>& z) {
  double m = z[0];
  for (double v : z) m = std::max(m, v);
  std::vector<double> p(z.size());
  double s = 0;
  for (size_t i = 0; i < z.size(); ++i) s += p[i] = gr_exp(z[i] - m);
  for (double& v : p) v /= s;
  return p;
}

int64_t sample_token(const std::vector<double>& z, const SampleOptions& o, int64_t step) {
  const int64_t V = static_cast<int64_t>(z.size());
  if (o.temperature == 0) return static_cast<int64_t>(std::max_element(z.begin(), z.end()) - z.begin());
  std::vector<int64_t> kept(static_cast<size_t>(V));
  std::iota(kept.begin(), kept.end(), int64_t{0});
  if (o.top_k > 0 && o.top_k < V) {
    std::stable_sort(kept.begin(), kept.end(), [&](int64_t a, int64_t b) { return z[static_cast<size_t>(a)] > z[static_cast<size_t>(b)]; });
    kept.resize(static_cast<size_t>(o.top_k));
    std::sort(kept.begin(), kept.end());
  }
  double m = z[static_cast<size_t>(kept[0])];
  for (int64_t i : kept) m = std::max(m, z[static_cast<size_t>(i)]);
  std::vector<double> w(kept.size());
  double s = 0;
  for (size_t j = 0; j < kept.size(); ++j) s += w[j] = gr_exp((z[static_cast<size_t>(kept[j])] - m) / o.temperature);
  const double target = random_unit(o.seed, kGenerateStream, static_cast<uint64_t>(step)) * s;
  double c = 0;
  for (size_t j = 0; j < kept.size(); ++j) {
    c += w[j];
    if (target < c) return kept[j];
  }
  return kept.back();
}

std::vector<int64_t> prompt_ids(const Vocab& vocab, const std::string& prompt, const std::string& where) {
  if (prompt.empty()) {
    const int64_t nl = vocab.kind == "chars" ? token_id(vocab, "\n") : -1;
    if (nl < 0) throw InputError(where, "", "an empty prompt needs a vocabulary with a line break (chars) to start from; give a prompt");
    return {nl};
  }
  const TextTokens t = split_tokens(prompt, vocab.kind, where);
  if (t.tokens.empty()) throw InputError(where, "", "the prompt holds no " + vocab.kind.substr(0, vocab.kind.size() - 1));
  return encode_tokens(vocab, t, where);
}

}  // namespace gr
