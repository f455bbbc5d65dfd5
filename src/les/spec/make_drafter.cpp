#include "les/spec/make_drafter.h"

#include <algorithm>

#include "les/spec/draft_model_drafter.h"
#include "les/spec/dspark_drafter.h"
#include "les/spec/mtp_drafter.h"
#include "les/spec/ngram_drafter.h"
#include "les/util/error.h"

namespace les {

const char* drafter_kinds() { return "none, draft, dspark, mtp, ngram"; }

std::unique_ptr<Drafter> make_drafter(const DrafterOptions& o, const Model& target) {
  if (o.kind.empty() || o.kind == "none") return nullptr;
  const bool needs_file = o.kind == "draft" || o.kind == "dspark";
  if (needs_file && o.draft_path.empty()) throw Error(strfmt("--spec %s needs --draft FILE", o.kind.c_str()));
  if (!needs_file && !o.draft_path.empty()) throw Error(strfmt("--draft is only for --spec draft or dspark (got --spec %s)", o.kind.c_str()));
  if (o.kind == "mtp") return std::make_unique<MtpDrafter>();
  if (o.kind == "ngram") return std::make_unique<NgramDrafter>(o.ngram_min, o.ngram_max);
  if (o.kind == "draft") {
    auto m = Model::load(o.draft_path);
    ContextParams cp;
    cp.n_threads = o.n_threads;
    cp.n_ctx = o.n_ctx;
    cp.n_batch = 256;
    return std::make_unique<DraftModelDrafter>(std::move(m), target, cp, o.sampling);
  }
  if (o.kind == "dspark") {
    const int n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min(target.config().n_ctx_train, 4096);
    auto m = DsparkModel::load(o.draft_path, target.config(), o.n_threads, n_ctx + 64);
    return std::make_unique<DsparkDrafter>(std::move(m));
  }
  throw Error(strfmt("unknown --spec '%s' (choose from: %s)", o.kind.c_str(), drafter_kinds()));
}

}  // namespace les
