// Tests of the runtime binding contract (rules 29-38) and its wire.

#include "reshard/binding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "reshard/placement.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::AddTensor;
using ::reshard::testing::FakeBindings;
using ::reshard::testing::FakeRuntimeFragment;
using ::reshard::testing::GridDraft;
using ::reshard::testing::Must;
using ::reshard::testing::PlacementDraft;
using ::reshard::testing::Sizes;
using ::reshard::testing::SpecOf;
using ::reshard::testing::TensorLayout;
using ::testing::HasSubstr;

// The message of a failed Result, or "<ok>" when it unexpectedly succeeded.
template <typename T>
std::string ErrorOf(const Result<T>& r) {
  return r.ok() ? std::string("<ok>") : r.status().message();
}

std::string ErrorOf(const Status& s) {
  return s.ok() ? std::string("<ok>") : s.message();
}

// Moves a fragment's view (and its own allocation) to `address`.
RuntimeBindingFragmentSpec MovedTo(const RuntimeBindingFragment& f,
                                   uint64_t address) {
  RuntimeBindingFragmentSpec s = SpecOf(f);
  s.address = address;
  s.storage_address = address;
  s.storage_offset_bytes = 0;
  return s;
}

TensorLayout Layout(std::string id, Dims shape, int64_t tp_dim = -1) {
  TensorLayout l;
  l.tensor_id = std::move(id);
  l.shape = std::move(shape);
  l.tp_dim = tp_dim;
  return l;
}

constexpr char kQProj[] = "layers.0.attn.q_proj.weight";
constexpr char kDownProj[] = "layers.0.mlp.down_proj.weight";
constexpr char kEmbed[] = "embed_tokens.weight";
constexpr char kLmHead[] = "lm_head.weight";
constexpr char kT0[] = "p-d0-p0-e0-t0";
constexpr char kT1[] = "p-d0-p0-e0-t1";

// TP2: q_proj {8,4} split on dim 0 and down_proj {4,8} split on dim 1; each
// participant holds two 4x4 bfloat16 fragments (32 bytes each).
WeightPlacementManifest Tp2Placement() {
  Sizes sizes;
  sizes.tp = 2;
  PlacementDraft d = GridDraft(sizes);
  AddTensor(&d, Layout(kQProj, {8, 4}, 0));
  AddTensor(&d, Layout(kDownProj, {4, 8}, 1));
  return Must(d.Build());
}

// One participant holding tied embed_tokens/lm_head {16,4} (128 bytes each)
// plus two independent {4,4} tensors of identical geometry (32 bytes each).
WeightPlacementManifest TiedPlacement() {
  PlacementDraft d = GridDraft(Sizes{});
  TensorLayout embed = Layout(kEmbed, {16, 4});
  embed.aliases = {kEmbed, kLmHead};
  TensorLayout head = Layout(kLmHead, {16, 4});
  head.aliases = {kEmbed, kLmHead};
  AddTensor(&d, embed);
  AddTensor(&d, head);
  AddTensor(&d, Layout("norm.a", {4, 4}));
  AddTensor(&d, Layout("norm.b", {4, 4}));
  return Must(d.Build());
}

// The fragment of `tensor_id` in a placement (first match).
const PlacementFragment& FragmentOf(const WeightPlacementManifest& p,
                                    std::string_view tensor_id) {
  for (const PlacementFragment* f : p.fragments()) {
    if (f->tensor_id() == tensor_id) return *f;
  }
  throw std::runtime_error("no fragment for " + std::string(tensor_id));
}

// A binding of the single participant of `p` whose fragments are built from
// `fragments`.
WeightRuntimeBindingManifest SingleBinding(
    const WeightPlacementManifest& p,
    std::vector<RuntimeBindingFragmentSpec> fragments) {
  WeightRuntimeBindingManifestSpec s = SpecOf(FakeBindings(p).at(0));
  s.fragments.clear();
  for (auto& f : fragments) {
    s.fragments.push_back(Must(RuntimeBindingFragment::Make(std::move(f))));
  }
  return Must(WeightRuntimeBindingManifest::Make(std::move(s)));
}

// A 4x4 bfloat16 view of "sha256:abc" in its own 32-byte allocation.
RuntimeBindingFragmentSpec ValidRuntimeSpec() {
  RuntimeBindingFragmentSpec s;
  s.placement_fragment_id = "sha256:abc";
  s.runtime_fragment_id = "rt-1";
  s.address = 0x1000;
  s.nbytes = 32;
  s.worker_id = "worker-0";
  s.endpoint = "10.0.0.1:5000";
  s.device = "cuda:0";
  s.itemsize = 2;
  s.local_shape = {4, 4};
  s.strides_bytes = {8, 2};
  s.storage_address = 0x1000;
  s.storage_nbytes = 32;
  s.storage_offset_bytes = 0;
  return s;
}

constexpr char kRuntimePrefix[] =
    "runtime fragment for placement fragment sha256:abc: ";

std::string RuntimeError(const RuntimeBindingFragmentSpec& s) {
  return ErrorOf(RuntimeBindingFragment::Make(s));
}

class BindingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    placement_ = std::make_unique<WeightPlacementManifest>(Tp2Placement());
    bindings_ = FakeBindings(*placement_);
    ASSERT_EQ(bindings_.size(), 2u);
    ASSERT_EQ(bindings_[0].participant_id(), kT0);
    ASSERT_EQ(bindings_[1].participant_id(), kT1);
    ASSERT_EQ(bindings_[0].fragments().size(), 2u);
  }

  const WeightPlacementManifest& placement() const { return *placement_; }
  // The placement fragments of participant t0, sorted by id like the
  // runtime fragments of bindings_[0].
  const std::vector<PlacementFragment>& t0_fragments() const {
    return placement_->FindPart(kT0)->fragments();
  }

  // bindings_[0] with fragment `i` replaced by `spec`.
  WeightRuntimeBindingManifest T0With(size_t i,
                                      RuntimeBindingFragmentSpec spec) const {
    WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
    s.fragments[i] = Must(RuntimeBindingFragment::Make(std::move(spec)));
    return Must(WeightRuntimeBindingManifest::Make(std::move(s)));
  }

  // The canonical wire of bindings_[0] with the first `from` replaced.
  std::string Patched(const std::string& from, const std::string& to) const {
    std::string json = WeightRuntimeBindingToJson(bindings_[0]);
    const size_t at = json.find(from);
    if (at == std::string::npos) {
      throw std::runtime_error("no \"" + from + "\" in " + json);
    }
    return json.replace(at, from.size(), to);
  }

  static std::string DecodeError(const std::string& json) {
    return ErrorOf(WeightRuntimeBindingFromJson(json));
  }

  std::unique_ptr<WeightPlacementManifest> placement_;
  std::vector<WeightRuntimeBindingManifest> bindings_;
};

// ----------------------------------------------- RuntimeBindingFragment

TEST_F(BindingTest, RuntimeFragmentKeepsItsFields) {
  ASSERT_OK_AND_ASSIGN(auto f,
                       RuntimeBindingFragment::Make(ValidRuntimeSpec()));
  EXPECT_EQ(f.placement_fragment_id(), "sha256:abc");
  EXPECT_EQ(f.runtime_fragment_id(), "rt-1");
  EXPECT_EQ(f.address(), 0x1000u);
  EXPECT_EQ(f.nbytes(), 32u);
  EXPECT_EQ(f.worker_id(), "worker-0");
  EXPECT_EQ(f.endpoint(), "10.0.0.1:5000");
  EXPECT_EQ(f.device(), "cuda:0");
  EXPECT_EQ(f.itemsize(), 2);
  EXPECT_EQ(f.local_shape(), (Dims{4, 4}));
  EXPECT_EQ(f.strides_bytes(), (Dims{8, 2}));
  EXPECT_EQ(f.storage_address(), 0x1000u);
  EXPECT_EQ(f.storage_nbytes(), 32u);
  EXPECT_EQ(f.storage_offset_bytes(), 0u);
}

TEST_F(BindingTest, RuntimeFragmentEqualityIgnoresOwner) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  auto plain = Must(RuntimeBindingFragment::Make(s));
  s.owner = std::make_shared<int>(7);
  auto owned = Must(RuntimeBindingFragment::Make(s));
  EXPECT_NE(owned.owner(), nullptr);
  EXPECT_EQ(plain, owned);
  s.device = "cuda:1";
  EXPECT_FALSE(plain == Must(RuntimeBindingFragment::Make(s)));
}

TEST_F(BindingTest, RuntimeFragmentRejectsEmptyPlacementFragmentId) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.placement_fragment_id = "";
  EXPECT_EQ(RuntimeError(s),
            "runtime fragment placement_fragment_id must be a non-empty "
            "string");
}

TEST_F(BindingTest, RuntimeFragmentRejectsEmptyIds) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.runtime_fragment_id = "";
  EXPECT_EQ(RuntimeError(s), std::string(kRuntimePrefix) +
                                 "fragment_id must be a non-empty string");
  s = ValidRuntimeSpec();
  s.worker_id = "";
  EXPECT_EQ(RuntimeError(s), std::string(kRuntimePrefix) +
                                 "worker_id must be a non-empty string");
  s = ValidRuntimeSpec();
  s.endpoint = "";
  EXPECT_EQ(RuntimeError(s), std::string(kRuntimePrefix) +
                                 "endpoint must be a non-empty string");
  s = ValidRuntimeSpec();
  s.device = "";
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) + "device must be a non-empty string");
}

TEST_F(BindingTest, RuntimeFragmentRejectsZeroAddress) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.address = 0;
  EXPECT_EQ(RuntimeError(s), std::string(kRuntimePrefix) +
                                 "address must be >= 1 (zero is reserved)");
}

TEST_F(BindingTest, RuntimeFragmentRejectsZeroNbytes) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.nbytes = 0;
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) + "nbytes must be >= 1");
}

TEST_F(BindingTest, RuntimeFragmentRejectsAddressOverflow) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  // The exclusive end 2^64 does not fit.
  s.address = UINT64_MAX - 31;
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) +
                "address + nbytes must fit in an unsigned 64-bit integer");
  s.address = UINT64_MAX;
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) +
                "address + nbytes must fit in an unsigned 64-bit integer");
  // The highest view whose end still fits is accepted.
  s.address = UINT64_MAX - 32;
  s.storage_address = UINT64_MAX - 32;
  auto f = RuntimeBindingFragment::Make(s);
  EXPECT_OK(f);
}

TEST_F(BindingTest, RuntimeFragmentRejectsNonPositiveItemsize) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.itemsize = 0;
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) + "itemsize must be >= 1");
}

TEST_F(BindingTest, RuntimeFragmentRejectsBadLocalShape) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.local_shape = {};
  s.strides_bytes = {};
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) + "local_shape must not be empty");
  s = ValidRuntimeSpec();
  s.local_shape = {4, 0};
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) + "local_shape extents must be >= 1");
}

TEST_F(BindingTest, RuntimeFragmentRejectsStridesRankMismatch) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.strides_bytes = {2};
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) +
                "strides_bytes must have the same rank as local_shape");
  s.strides_bytes = {16, 8, 2};
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) +
                "strides_bytes must have the same rank as local_shape");
}

TEST_F(BindingTest, RuntimeFragmentRejectsNegativeStride) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.strides_bytes = {-8, 2};
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) + "strides_bytes must be >= 0");
  // Also on an extent-1 dimension: it is rejected before normalisation.
  s.local_shape = {1, 16};
  s.strides_bytes = {-1, 2};
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) + "strides_bytes must be >= 0");
}

TEST_F(BindingTest, RuntimeFragmentRejectsZeroStrideOnNonSingletonDim) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.strides_bytes = {0, 2};
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) +
                "stride 0 is only allowed on extent-1 dimensions");
}

TEST_F(BindingTest, RuntimeFragmentNormalisesSingletonStrides) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.local_shape = {1, 16};
  s.strides_bytes = {0, 2};
  ASSERT_OK_AND_ASSIGN(auto f, RuntimeBindingFragment::Make(s));
  EXPECT_EQ(f.strides_bytes(), (Dims{32, 2}));
  s.strides_bytes = {999, 2};
  ASSERT_OK_AND_ASSIGN(auto g, RuntimeBindingFragment::Make(s));
  EXPECT_EQ(g.strides_bytes(), (Dims{32, 2}));
  EXPECT_EQ(f, g);
  // A trailing singleton takes the itemsize.
  s.local_shape = {16, 1};
  s.strides_bytes = {2, 0};
  ASSERT_OK_AND_ASSIGN(auto h, RuntimeBindingFragment::Make(s));
  EXPECT_EQ(h.strides_bytes(), (Dims{2, 2}));
}

TEST_F(BindingTest, RuntimeFragmentRejectsZeroStorageAddress) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.storage_address = 0;
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) +
                "storage_address must be >= 1 (zero is reserved)");
}

TEST_F(BindingTest, RuntimeFragmentRejectsZeroStorageNbytes) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.storage_nbytes = 0;
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) + "storage_nbytes must be >= 1");
}

TEST_F(BindingTest, RuntimeFragmentRejectsStorageOverflow) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.storage_address = UINT64_MAX - 16;
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) +
                "storage_address + storage_nbytes must fit in an unsigned "
                "64-bit integer");
  s = ValidRuntimeSpec();
  s.storage_offset_bytes = UINT64_MAX;
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) +
                "storage_address + storage_offset_bytes must fit in an "
                "unsigned 64-bit integer");
}

TEST_F(BindingTest, RuntimeFragmentRejectsAddressOutsideStorageOffset) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.storage_nbytes = 64;
  s.storage_offset_bytes = 16;  // address should be 0x1010
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) +
                "address must equal storage_address + storage_offset_bytes");
  s.address = 0x1010;
  auto f = RuntimeBindingFragment::Make(s);
  EXPECT_OK(f);
}

TEST_F(BindingTest, RuntimeFragmentRejectsViewPastItsAllocation) {
  RuntimeBindingFragmentSpec s = ValidRuntimeSpec();
  s.storage_nbytes = 40;
  s.storage_offset_bytes = 16;
  s.address = 0x1010;  // [16, 48) of a 40-byte allocation
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) +
                "view exceeds its storage allocation: storage_offset_bytes + "
                "nbytes > storage_nbytes");
  s.storage_nbytes = 48;  // exactly fits
  auto f = RuntimeBindingFragment::Make(s);
  EXPECT_OK(f);
  // Without any offset the allocation must still hold the whole view.
  s = ValidRuntimeSpec();
  s.storage_nbytes = 31;
  EXPECT_EQ(RuntimeError(s),
            std::string(kRuntimePrefix) +
                "view exceeds its storage allocation: storage_offset_bytes + "
                "nbytes > storage_nbytes");
}

// ------------------------------------------- WeightRuntimeBindingManifest

TEST_F(BindingTest, FakeBindingsAreValid) {
  for (const auto& b : bindings_) {
    EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), b)), "<ok>")
        << b.participant_id();
  }
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), bindings_)), "<ok>");
}

TEST_F(BindingTest, ManifestSortsFragmentsAndFindsThem) {
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  std::swap(s.fragments[0], s.fragments[1]);
  ASSERT_OK_AND_ASSIGN(auto b, WeightRuntimeBindingManifest::Make(s));
  ASSERT_EQ(b.fragments().size(), 2u);
  EXPECT_LT(b.fragments()[0].placement_fragment_id(),
            b.fragments()[1].placement_fragment_id());
  const std::string& id = t0_fragments()[1].placement_fragment_id();
  const RuntimeBindingFragment* f = b.FindFragment(id);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->placement_fragment_id(), id);
  EXPECT_EQ(b.FindFragment("sha256:missing"), nullptr);
  EXPECT_EQ(b.generation(), 1u);
  EXPECT_EQ(b.lease_id(), "lease-1");
  EXPECT_EQ(b.instance_id(), std::string("instance-") + kT0);
}

TEST_F(BindingTest, ManifestRejectsBadDigestFormat) {
  const std::string kBadDigest =
      "runtime binding placement_digest must be a lowercase SHA-256 digest "
      "(64 hex characters)";
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  s.placement_digest = "abc";
  EXPECT_EQ(ErrorOf(WeightRuntimeBindingManifest::Make(s)), kBadDigest);
  s.placement_digest = std::string(64, 'A');
  EXPECT_EQ(ErrorOf(WeightRuntimeBindingManifest::Make(s)), kBadDigest);
  s.placement_digest = std::string(63, 'a') + "g";
  EXPECT_EQ(ErrorOf(WeightRuntimeBindingManifest::Make(s)), kBadDigest);
  s.placement_digest = std::string(65, 'a');
  EXPECT_EQ(ErrorOf(WeightRuntimeBindingManifest::Make(s)), kBadDigest);
  // A digest carries no "sha256:" prefix.
  s.placement_digest = "sha256:" + placement().digest();
  EXPECT_EQ(ErrorOf(WeightRuntimeBindingManifest::Make(s)), kBadDigest);
}

TEST_F(BindingTest, ManifestRejectsUppercaseDigest) {
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  std::string upper = placement().digest();
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  ASSERT_NE(upper, placement().digest());
  s.placement_digest = upper;
  EXPECT_EQ(ErrorOf(WeightRuntimeBindingManifest::Make(s)),
            "runtime binding placement_digest must be a lowercase SHA-256 "
            "digest (64 hex characters)");
}

TEST_F(BindingTest, ManifestRejectsEmptyIds) {
  const std::pair<std::string WeightRuntimeBindingManifestSpec::*, const char*>
      fields[] = {
          {&WeightRuntimeBindingManifestSpec::resource_id,
           "runtime binding resource_id must be a non-empty string"},
          {&WeightRuntimeBindingManifestSpec::placement_id,
           "runtime binding placement_id must be a non-empty string"},
          {&WeightRuntimeBindingManifestSpec::instance_id,
           "runtime binding instance_id must be a non-empty string"},
          {&WeightRuntimeBindingManifestSpec::lease_id,
           "runtime binding lease_id must be a non-empty string"},
          {&WeightRuntimeBindingManifestSpec::revision,
           "runtime binding revision must be a non-empty string"},
          {&WeightRuntimeBindingManifestSpec::participant_id,
           "runtime binding participant_id must be a non-empty string"},
      };
  for (const auto& [field, message] : fields) {
    WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
    s.*field = "";
    EXPECT_EQ(ErrorOf(WeightRuntimeBindingManifest::Make(s)), message);
  }
}

TEST_F(BindingTest, ManifestRejectsDuplicatePlacementFragment) {
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  RuntimeBindingFragmentSpec copy = SpecOf(s.fragments[0]);
  copy.runtime_fragment_id = "rt-copy";
  s.fragments.push_back(Must(RuntimeBindingFragment::Make(copy)));
  EXPECT_EQ(
      ErrorOf(WeightRuntimeBindingManifest::Make(s)),
      std::string("runtime binding of participant ") + kT0 +
          " has a duplicate placement fragment: " + copy.placement_fragment_id);
}

TEST_F(BindingTest, ManifestRejectsDuplicateRuntimeFragmentId) {
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  RuntimeBindingFragmentSpec second = SpecOf(s.fragments[1]);
  second.runtime_fragment_id = s.fragments[0].runtime_fragment_id();
  s.fragments[1] = Must(RuntimeBindingFragment::Make(second));
  EXPECT_EQ(ErrorOf(WeightRuntimeBindingManifest::Make(s)),
            std::string("runtime binding of participant ") + kT0 +
                " has a duplicate runtime fragment_id: " +
                second.runtime_fragment_id);
}

// --------------------------------------------------- ValidateRuntimeBinding

TEST_F(BindingTest, RejectsDifferentResourceId) {
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  s.resource_id = "other-model";
  auto b = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), b)),
            "placement and runtime binding resource_id differ: demo-model vs "
            "other-model");
}

TEST_F(BindingTest, RejectsDifferentPlacementId) {
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  s.placement_id = "sha256:" + std::string(64, '0');
  auto b = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), b)),
            std::string("placement_id and runtime binding placement_id differ "
                        "(participant ") +
                kT0 + ")");
}

TEST_F(BindingTest, RejectsDifferentDigest) {
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  s.placement_digest = std::string(64, '0');
  ASSERT_NE(s.placement_digest, placement().digest());
  auto b = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), b)),
            std::string("placement digest and runtime binding placement "
                        "digest differ (participant ") +
                kT0 + ")");
}

TEST_F(BindingTest, RejectsDifferentRevision) {
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  s.revision = "step-2";
  auto b = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), b)),
            "placement and runtime binding revision differ: step-1 vs step-2");
}

TEST_F(BindingTest, RejectsUnknownParticipant) {
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  s.participant_id = "p-d0-p0-e0-t9";
  auto b = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), b)),
            "unknown runtime binding participant: p-d0-p0-e0-t9");
}

TEST_F(BindingTest, RejectsUnknownPlacementFragment) {
  // An id that is in no part.
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  RuntimeBindingFragmentSpec extra = MovedTo(s.fragments[0], 0x900000);
  extra.placement_fragment_id = "sha256:" + std::string(64, 'f');
  extra.runtime_fragment_id = "rt-extra";
  s.fragments.push_back(Must(RuntimeBindingFragment::Make(extra)));
  auto b = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), b)),
            "unknown placement fragment in runtime binding: " +
                extra.placement_fragment_id + " (participant " + kT0 + ")");

  // A real fragment of another participant is unknown to this one.
  s = SpecOf(bindings_[0]);
  const RuntimeBindingFragment& foreign = bindings_[1].fragments()[0];
  RuntimeBindingFragmentSpec moved = MovedTo(foreign, 0x900000);
  s.fragments.push_back(Must(RuntimeBindingFragment::Make(moved)));
  auto c = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), c)),
            "unknown placement fragment in runtime binding: " +
                foreign.placement_fragment_id() + " (participant " + kT0 + ")");
}

TEST_F(BindingTest, RejectsMissingPlacementFragment) {
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  s.fragments.erase(s.fragments.begin());
  auto b = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), b)),
            "missing placement fragment in runtime binding: " +
                t0_fragments()[0].placement_fragment_id() + " (participant " +
                kT0 + ")");
  // The last one as well.
  s = SpecOf(bindings_[0]);
  s.fragments.pop_back();
  auto c = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), c)),
            "missing placement fragment in runtime binding: " +
                t0_fragments()[1].placement_fragment_id() + " (participant " +
                kT0 + ")");
}

TEST_F(BindingTest, RejectsNbytesMismatch) {
  RuntimeBindingFragmentSpec f = SpecOf(bindings_[0].fragments()[0]);
  f.nbytes = 30;
  auto b = T0With(0, f);
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), b)),
            "runtime binding byte size does not match placement: " +
                f.placement_fragment_id + ": expected 32, got 30");
}

TEST_F(BindingTest, RejectsLocalShapeMismatch) {
  RuntimeBindingFragmentSpec f = SpecOf(bindings_[0].fragments()[0]);
  f.local_shape = {2, 8};
  f.strides_bytes = {16, 2};
  auto b = T0With(0, f);
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), b)),
            "runtime binding local_shape does not match placement: " +
                f.placement_fragment_id);
}

TEST_F(BindingTest, RejectsItemsizeMismatchEvenIfSelfConsistent) {
  // The runtime claims 4-byte items and strides to match: its itemsize is
  // not trusted, the descriptor's is.
  RuntimeBindingFragmentSpec f = SpecOf(bindings_[0].fragments()[1]);
  f.itemsize = 4;
  f.strides_bytes = {16, 4};
  auto b = T0With(1, f);
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), b)),
            "runtime binding itemsize does not match tensor descriptor: " +
                f.placement_fragment_id + ": expected 2, got 4");
}

TEST_F(BindingTest, RejectsNonCanonicalStrides) {
  const std::string id = t0_fragments()[0].placement_fragment_id();
  // Transposed (column-major) 4x4 view.
  RuntimeBindingFragmentSpec f = SpecOf(bindings_[0].fragments()[0]);
  f.strides_bytes = {2, 8};
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), T0With(0, f))),
            "runtime binding stride does not describe a canonical contiguous "
            "view: " +
                id);
  // Padded rows.
  f.strides_bytes = {16, 2};
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), T0With(0, f))),
            "runtime binding stride does not describe a canonical contiguous "
            "view: " +
                id);
}

TEST_F(BindingTest, SingletonStridesAreNormalisedThenAccepted) {
  // TP2 split of a {2,4} tensor on dim 0: every fragment is {1,4}.
  Sizes sizes;
  sizes.tp = 2;
  PlacementDraft d = GridDraft(sizes);
  AddTensor(&d, Layout("norm.w", {2, 4}, 0));
  WeightPlacementManifest p = Must(d.Build());
  auto bindings = FakeBindings(p);
  ASSERT_EQ(bindings.size(), 2u);
  for (int64_t odd : {int64_t{0}, int64_t{999}}) {
    WeightRuntimeBindingManifestSpec s = SpecOf(bindings[0]);
    RuntimeBindingFragmentSpec f = SpecOf(s.fragments[0]);
    ASSERT_EQ(f.local_shape, (Dims{1, 4}));
    f.strides_bytes = {odd, 2};
    s.fragments[0] = Must(RuntimeBindingFragment::Make(f));
    EXPECT_EQ(s.fragments[0].strides_bytes(), (Dims{8, 2}));
    auto b = Must(WeightRuntimeBindingManifest::Make(s));
    EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(p, b)), "<ok>") << odd;
  }
}

TEST_F(BindingTest, RejectsOverlappingViewsInOneAddressSpace) {
  const RuntimeBindingFragment& a = bindings_[0].fragments()[0];
  const RuntimeBindingFragment& b = bindings_[0].fragments()[1];
  ASSERT_LT(a.address(), b.address());
  auto binding = T0With(1, MovedTo(b, a.address() + 16));
  EXPECT_EQ(
      ErrorOf(ValidateRuntimeBinding(placement(), binding)),
      "runtime binding address ranges overlap: " + a.placement_fragment_id() +
          " and " + b.placement_fragment_id() + " (worker worker-" + kT0 +
          ", device cpu)");
  // Touching ranges do not overlap.
  auto touching = T0With(1, MovedTo(b, a.address() + a.nbytes()));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), touching)), "<ok>");
}

TEST_F(BindingTest, OverlapIsAllowedAcrossWorkersAndDevices) {
  const RuntimeBindingFragment& a = bindings_[0].fragments()[0];
  const RuntimeBindingFragment& b = bindings_[0].fragments()[1];
  RuntimeBindingFragmentSpec other_worker = MovedTo(b, a.address());
  other_worker.worker_id = "worker-other";
  EXPECT_EQ(
      ErrorOf(ValidateRuntimeBinding(placement(), T0With(1, other_worker))),
      "<ok>");
  RuntimeBindingFragmentSpec other_device = MovedTo(b, a.address());
  other_device.device = "cuda:1";
  EXPECT_EQ(
      ErrorOf(ValidateRuntimeBinding(placement(), T0With(1, other_device))),
      "<ok>");
}

TEST_F(BindingTest, EndpointIsNotAnAddressSpace) {
  const RuntimeBindingFragment& a = bindings_[0].fragments()[0];
  const RuntimeBindingFragment& b = bindings_[0].fragments()[1];
  RuntimeBindingFragmentSpec other_endpoint = MovedTo(b, a.address() + 8);
  other_endpoint.endpoint = "endpoint-other";
  EXPECT_EQ(
      ErrorOf(ValidateRuntimeBinding(placement(), T0With(1, other_endpoint))),
      "runtime binding address ranges overlap: " + a.placement_fragment_id() +
          " and " + b.placement_fragment_id() + " (worker worker-" + kT0 +
          ", device cpu)");
}

TEST_F(BindingTest, RejectsPartiallyOverlappingAllocations) {
  // Views [S, S+32) and [S+32, S+64) are disjoint, but the allocations
  // [S, S+64) and [S+32, S+96) overlap without being identical.
  const uint64_t base = 0x200000;
  RuntimeBindingFragmentSpec a = SpecOf(bindings_[0].fragments()[0]);
  a.address = base;
  a.storage_address = base;
  a.storage_nbytes = 64;
  a.storage_offset_bytes = 0;
  RuntimeBindingFragmentSpec b = SpecOf(bindings_[0].fragments()[1]);
  b.address = base + 32;
  b.storage_address = base + 32;
  b.storage_nbytes = 64;
  b.storage_offset_bytes = 0;
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  s.fragments = {Must(RuntimeBindingFragment::Make(a)),
                 Must(RuntimeBindingFragment::Make(b))};
  auto binding = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), binding)),
            "runtime binding storage allocation ranges overlap: " +
                a.placement_fragment_id + " and " + b.placement_fragment_id +
                " (worker worker-" + kT0 + ", device cpu)");
}

TEST_F(BindingTest, AcceptsDisjointViewsOfOneAllocation) {
  const uint64_t base = 0x200000;
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  std::vector<RuntimeBindingFragment> views;
  for (size_t i = 0; i < 2; ++i) {
    RuntimeBindingFragmentSpec f = SpecOf(s.fragments[i]);
    f.storage_address = base;
    f.storage_nbytes = 128;
    f.storage_offset_bytes = 48 * i;  // [0, 32) and [48, 80)
    f.address = base + f.storage_offset_bytes;
    views.push_back(Must(RuntimeBindingFragment::Make(f)));
  }
  s.fragments = views;
  auto binding = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), binding)), "<ok>");
}

TEST_F(BindingTest, AcceptsExactDeclaredAlias) {
  WeightPlacementManifest p = TiedPlacement();
  const PlacementFragment& embed = FragmentOf(p, kEmbed);
  const PlacementFragment& head = FragmentOf(p, kLmHead);
  ASSERT_EQ(embed.aliases(), (std::vector<std::string>{kEmbed, kLmHead}));
  auto binding = SingleBinding(
      p, {FakeRuntimeFragment(embed, 2, 0x10000),
          FakeRuntimeFragment(head, 2, 0x10000),
          FakeRuntimeFragment(FragmentOf(p, "norm.a"), 2, 0x20000),
          FakeRuntimeFragment(FragmentOf(p, "norm.b"), 2, 0x30000)});
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(p, binding)), "<ok>");
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(p, {binding})), "<ok>");
}

TEST_F(BindingTest, RejectsAliasAtAnOffset) {
  // Same tied pair, same nbytes, but not the same range.
  WeightPlacementManifest p = TiedPlacement();
  const PlacementFragment& embed = FragmentOf(p, kEmbed);
  const PlacementFragment& head = FragmentOf(p, kLmHead);
  auto binding = SingleBinding(
      p, {FakeRuntimeFragment(embed, 2, 0x10000),
          FakeRuntimeFragment(head, 2, 0x10040),
          FakeRuntimeFragment(FragmentOf(p, "norm.a"), 2, 0x20000),
          FakeRuntimeFragment(FragmentOf(p, "norm.b"), 2, 0x30000)});
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(p, binding)),
            "runtime binding address ranges overlap: " +
                embed.placement_fragment_id() + " and " +
                head.placement_fragment_id() +
                " (worker worker-p-d0-p0-e0-t0, device cpu)");
}

TEST_F(BindingTest, RejectsUndeclaredAlias) {
  // norm.a and norm.b have identical geometry but declare no alias group.
  WeightPlacementManifest p = TiedPlacement();
  const PlacementFragment& a = FragmentOf(p, "norm.a");
  const PlacementFragment& b = FragmentOf(p, "norm.b");
  auto binding =
      SingleBinding(p, {FakeRuntimeFragment(FragmentOf(p, kEmbed), 2, 0x10000),
                        FakeRuntimeFragment(FragmentOf(p, kLmHead), 2, 0x10000),
                        FakeRuntimeFragment(a, 2, 0x20000),
                        FakeRuntimeFragment(b, 2, 0x20000)});
  EXPECT_THAT(ErrorOf(ValidateRuntimeBinding(p, binding)),
              HasSubstr("runtime binding address ranges overlap: "));
  EXPECT_THAT(ErrorOf(ValidateRuntimeBinding(p, binding)),
              HasSubstr(a.placement_fragment_id()));
  EXPECT_THAT(ErrorOf(ValidateRuntimeBinding(p, binding)),
              HasSubstr(b.placement_fragment_id()));
}

TEST_F(BindingTest, RejectsAliasWithDifferentNbytes) {
  // A tied group whose members differ in shape: embed {16,4} (128 bytes) and
  // lm_head {16,2} (64 bytes) can never be an exact alias.
  PlacementDraft d = GridDraft(Sizes{});
  TensorLayout embed = Layout(kEmbed, {16, 4});
  embed.aliases = {kEmbed, kLmHead};
  TensorLayout head = Layout(kLmHead, {16, 2});
  head.aliases = {kEmbed, kLmHead};
  AddTensor(&d, embed);
  AddTensor(&d, head);
  ASSERT_OK_AND_ASSIGN(auto p, d.Build());
  const PlacementFragment& e = FragmentOf(p, kEmbed);
  const PlacementFragment& h = FragmentOf(p, kLmHead);
  ASSERT_NE(e.nbytes(), h.nbytes());
  auto binding = SingleBinding(p, {FakeRuntimeFragment(e, 2, 0x10000),
                                   FakeRuntimeFragment(h, 2, 0x10000)});
  // Sorted by (address, nbytes): the 64-byte lm_head view comes first.
  EXPECT_EQ(
      ErrorOf(ValidateRuntimeBinding(p, binding)),
      "runtime binding address ranges overlap: " + h.placement_fragment_id() +
          " and " + e.placement_fragment_id() +
          " (worker worker-p-d0-p0-e0-t0, device cpu)");
}

// ------------------------------------------------- ValidateRuntimeBindings

TEST_F(BindingTest, BindingsRejectDuplicateParticipant) {
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(),
                                            {bindings_[0], bindings_[0]})),
            std::string("duplicate runtime binding participant: ") + kT0);
  EXPECT_EQ(
      ErrorOf(ValidateRuntimeBindings(placement(), {bindings_[0], bindings_[0]},
                                      BindingCoverage::kSubset)),
      std::string("duplicate runtime binding participant: ") + kT0);
}

TEST_F(BindingTest,
       BindingsRejectDuplicateRuntimeFragmentIdAcrossParticipants) {
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[1]);
  RuntimeBindingFragmentSpec f = SpecOf(s.fragments[0]);
  const std::string taken = bindings_[0].fragments()[0].runtime_fragment_id();
  f.runtime_fragment_id = taken;
  s.fragments[0] = Must(RuntimeBindingFragment::Make(f));
  auto t1 = Must(WeightRuntimeBindingManifest::Make(s));
  // Each binding is valid on its own.
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), t1)), "<ok>");
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), {bindings_[0], t1})),
            "duplicate runtime fragment_id across participants: " + taken);
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), {bindings_[0], t1},
                                            BindingCoverage::kSubset)),
            "duplicate runtime fragment_id across participants: " + taken);
}

TEST_F(BindingTest, BindingsRequireEveryOwningParticipant) {
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), {bindings_[0]})),
            std::string("missing runtime binding participant: ") + kT1);
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), {})),
            std::string("missing runtime binding participant: ") + kT0);
}

TEST_F(BindingTest, BindingsAcceptASubsetWithoutRequireAll) {
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), {bindings_[1]},
                                            BindingCoverage::kSubset)),
            "<ok>");
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), {},
                                            BindingCoverage::kSubset)),
            "<ok>");
  // Every binding of the subset is still validated.
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[1]);
  s.revision = "step-2";
  auto stale = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), {stale},
                                            BindingCoverage::kSubset)),
            "placement and runtime binding revision differ: step-1 vs step-2");
}

TEST_F(BindingTest, BindingsRejectParticipantOwningNoFragments) {
  // PP2 where only PP rank 0 owns the tensor: p-d0-p1-e0-t0 has an empty
  // part and needs no binding.
  Sizes sizes;
  sizes.pp = 2;
  PlacementDraft d = GridDraft(sizes);
  TensorLayout l = Layout("layers.0.w", {4, 4});
  l.pp_owner = 0;
  AddTensor(&d, l);
  WeightPlacementManifest p = Must(d.Build());
  ASSERT_NE(p.FindPart("p-d0-p1-e0-t0"), nullptr);
  ASSERT_TRUE(p.FindPart("p-d0-p1-e0-t0")->fragments().empty());
  auto bindings = FakeBindings(p);
  ASSERT_EQ(bindings.size(), 1u);
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(p, bindings)), "<ok>");

  WeightRuntimeBindingManifestSpec s = SpecOf(bindings[0]);
  s.participant_id = "p-d0-p1-e0-t0";
  s.instance_id = "instance-p-d0-p1-e0-t0";
  s.fragments.clear();
  auto empty = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(p, {bindings[0], empty})),
            "unknown runtime binding participant: p-d0-p1-e0-t0 owns no "
            "fragments and needs no binding");
}

// bindings_ re-homed into one instance and one worker, with the fragments of
// bindings_[1] starting at `t1_base`.
std::vector<WeightRuntimeBindingManifest> SharedInstance(
    const std::vector<WeightRuntimeBindingManifest>& bindings, uint64_t t1_base,
    const std::string& t1_instance) {
  std::vector<WeightRuntimeBindingManifest> out;
  for (size_t i = 0; i < bindings.size(); ++i) {
    WeightRuntimeBindingManifestSpec s = SpecOf(bindings[i]);
    s.instance_id = i == 1 ? t1_instance : "shared-instance";
    uint64_t address = i == 1 ? t1_base : 0x10000;
    for (auto& f : s.fragments) {
      RuntimeBindingFragmentSpec spec = MovedTo(f, address);
      spec.worker_id = "worker-shared";
      f = Must(RuntimeBindingFragment::Make(spec));
      address += 0x1000;
    }
    out.push_back(Must(WeightRuntimeBindingManifest::Make(std::move(s))));
  }
  return out;
}

TEST_F(BindingTest, BindingsRejectOverlapWithinOneInstance) {
  auto shared = SharedInstance(bindings_, 0x10010, "shared-instance");
  // Each binding is valid on its own.
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), shared[0])), "<ok>");
  EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), shared[1])), "<ok>");
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), shared)),
            "runtime binding address ranges overlap: " +
                shared[0].fragments()[0].placement_fragment_id() + " and " +
                shared[1].fragments()[0].placement_fragment_id() +
                " (worker worker-shared, device cpu)");
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), shared,
                                            BindingCoverage::kSubset)),
            "runtime binding address ranges overlap: " +
                shared[0].fragments()[0].placement_fragment_id() + " and " +
                shared[1].fragments()[0].placement_fragment_id() +
                " (worker worker-shared, device cpu)");
}

TEST_F(BindingTest, BindingsRejectStorageOverlapWithinOneInstance) {
  auto shared = SharedInstance(bindings_, 0x100000, "shared-instance");
  // Grow t1's first allocation backwards so it partially covers t0's
  // first view's allocation [0x10000, 0x10020).
  WeightRuntimeBindingManifestSpec s = SpecOf(shared[1]);
  RuntimeBindingFragmentSpec f = SpecOf(s.fragments[0]);
  f.address = 0x10020;
  f.storage_address = 0x10010;
  f.storage_offset_bytes = 0x10;
  f.storage_nbytes = 0x30;
  s.fragments[0] = Must(RuntimeBindingFragment::Make(f));
  shared[1] = Must(WeightRuntimeBindingManifest::Make(s));
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), shared)),
            "runtime binding storage allocation ranges overlap: " +
                shared[0].fragments()[0].placement_fragment_id() + " and " +
                shared[1].fragments()[0].placement_fragment_id() +
                " (worker worker-shared, device cpu)");
}

TEST_F(BindingTest, BindingsAllowOverlapAcrossInstances) {
  auto separate = SharedInstance(bindings_, 0x10010, "another-instance");
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), separate)), "<ok>");
  // FakeBindings already reuse the same addresses in every instance.
  EXPECT_EQ(bindings_[0].fragments()[0].address(),
            bindings_[1].fragments()[0].address());
  EXPECT_EQ(ErrorOf(ValidateRuntimeBindings(placement(), bindings_)), "<ok>");
}

// ----------------------------------------------------------------- wire

TEST_F(BindingTest, JsonRoundTripIsByteIdentical) {
  for (const auto& b : bindings_) {
    const std::string json = WeightRuntimeBindingToJson(b);
    ASSERT_OK_AND_ASSIGN(auto decoded, WeightRuntimeBindingFromJson(json));
    EXPECT_EQ(WeightRuntimeBindingToJson(decoded), json);
    EXPECT_EQ(decoded.participant_id(), b.participant_id());
    EXPECT_EQ(decoded.generation(), b.generation());
    EXPECT_EQ(decoded.fragments(), b.fragments());
    EXPECT_EQ(ErrorOf(ValidateRuntimeBinding(placement(), decoded)), "<ok>");
  }
}

TEST_F(BindingTest, JsonIsCanonical) {
  const std::string json = WeightRuntimeBindingToJson(bindings_[0]);
  EXPECT_EQ(
      json.rfind("{\"fragments\":[{\"address\":65536,\"device\":\"cpu\",", 0),
      0u)
      << json;
  EXPECT_THAT(json,
              HasSubstr(",\"generation\":1,\"instance_id\":\"instance-" +
                        std::string(kT0) + "\",\"lease_id\":\"lease-1\","));
  EXPECT_THAT(
      json, HasSubstr("\"placement_digest\":\"" + placement().digest() + "\""));
  const std::string tail =
      "\"resource_id\":\"demo-model\",\"resource_kind\":\"model_weight\","
      "\"revision\":\"step-1\"}";
  ASSERT_GE(json.size(), tail.size());
  EXPECT_EQ(json.substr(json.size() - tail.size()), tail);
  EXPECT_EQ(json.find(' '), std::string::npos);
}

TEST_F(BindingTest, JsonRoundTripEscapesNonAsciiIds) {
  RuntimeBindingFragmentSpec f = SpecOf(bindings_[0].fragments()[0]);
  f.worker_id = "worker-\u00e9t\u00e9";
  f.device = "gpu-\U0001F680";
  WeightRuntimeBindingManifestSpec s = SpecOf(bindings_[0]);
  s.fragments[0] = Must(RuntimeBindingFragment::Make(f));
  s.lease_id = "lease-\u00e9";
  auto b = Must(WeightRuntimeBindingManifest::Make(s));
  const std::string json = WeightRuntimeBindingToJson(b);
  // ensure_ascii=True: escaped, surrogate pairs above the BMP.
  EXPECT_THAT(json, HasSubstr("\"device\":\"gpu-\\ud83d\\ude80\""));
  EXPECT_THAT(json, HasSubstr("\"worker_id\":\"worker-\\u00e9t\\u00e9\""));
  EXPECT_THAT(json, HasSubstr("\"lease_id\":\"lease-\\u00e9\""));
  for (unsigned char c : json) EXPECT_LT(c, 0x80);
  ASSERT_OK_AND_ASSIGN(auto decoded, WeightRuntimeBindingFromJson(json));
  EXPECT_EQ(decoded.lease_id(), "lease-\u00e9");
  EXPECT_EQ(decoded.fragments()[0].device(), "gpu-\U0001F680");
  EXPECT_EQ(decoded.fragments()[0].worker_id(), "worker-\u00e9t\u00e9");
  EXPECT_EQ(WeightRuntimeBindingToJson(decoded), json);
}

TEST_F(BindingTest, JsonRoundTripOfLargeAddresses) {
  RuntimeBindingFragmentSpec f = SpecOf(bindings_[0].fragments()[0]);
  f.storage_address = UINT64_MAX - 0x1000;
  f.storage_nbytes = 0x100;
  f.storage_offset_bytes = 0x20;
  f.address = f.storage_address + 0x20;
  auto b = T0With(0, f);
  const std::string json = WeightRuntimeBindingToJson(b);
  EXPECT_THAT(json, HasSubstr("\"address\":18446744073709547551,"));
  ASSERT_OK_AND_ASSIGN(auto decoded, WeightRuntimeBindingFromJson(json));
  EXPECT_EQ(decoded.fragments()[0].address(), UINT64_MAX - 0x1000 + 0x20);
  EXPECT_EQ(WeightRuntimeBindingToJson(decoded), json);
}

TEST_F(BindingTest, WireRejectsUnknownField) {
  EXPECT_EQ(
      DecodeError(Patched("{\"fragments\"", "{\"extra\":1,\"fragments\"")),
      "$: runtime binding manifest schema fields do not match contract: "
      "unknown field \"extra\"");
  EXPECT_EQ(DecodeError(Patched("{\"address\"", "{\"owner\":null,\"address\"")),
            "fragments[0]: runtime binding fragment schema fields do not match "
            "contract: unknown field \"owner\"");
}

TEST_F(BindingTest, WireRejectsMissingField) {
  EXPECT_EQ(DecodeError(Patched("\"lease_id\":\"lease-1\",", "")),
            "$: runtime binding manifest schema fields do not match contract: "
            "missing field \"lease_id\"");
  EXPECT_EQ(DecodeError(Patched("\"device\":\"cpu\",", "")),
            "fragments[0]: runtime binding fragment schema fields do not match "
            "contract: missing field \"device\"");
}

TEST_F(BindingTest, WireRejectsWrongResourceKind) {
  EXPECT_EQ(DecodeError(Patched("\"resource_kind\":\"model_weight\"",
                                "\"resource_kind\":\"kv_cache\"")),
            "runtime binding resource_kind must be model_weight, got "
            "\"kv_cache\"");
}

TEST_F(BindingTest, WireRejectsBoolAddress) {
  EXPECT_EQ(DecodeError(Patched("\"address\":65536", "\"address\":true")),
            "fragments[0].address must be an integer");
}

TEST_F(BindingTest, WireRejectsNonIntegerNumbers) {
  EXPECT_EQ(DecodeError(Patched("\"generation\":1", "\"generation\":1.0")),
            "generation must be an integer");
  EXPECT_EQ(DecodeError(Patched("\"generation\":1", "\"generation\":\"1\"")),
            "generation must be an integer");
}

TEST_F(BindingTest, WireRejectsNegativeAddress) {
  EXPECT_EQ(DecodeError(Patched("\"address\":65536", "\"address\":-1")),
            "fragments[0].address must fit in an unsigned 64-bit integer");
}

TEST_F(BindingTest, WireRejectsAddressAboveU64) {
  EXPECT_EQ(DecodeError(Patched("\"address\":65536",
                                "\"address\":18446744073709551616")),
            "JSON integer must fit in an unsigned 64-bit integer");
}

TEST_F(BindingTest, WireRejectsDuplicateKey) {
  EXPECT_EQ(DecodeError(Patched("{\"fragments\"",
                                "{\"lease_id\":\"lease-2\",\"fragments\"")),
            "$: duplicate JSON field \"lease_id\"");
}

TEST_F(BindingTest, WireRejectsEmptyId) {
  EXPECT_EQ(
      DecodeError(Patched("\"lease_id\":\"lease-1\"", "\"lease_id\":\"\"")),
      "lease_id must be a non-empty string");
  EXPECT_EQ(DecodeError(Patched("\"device\":\"cpu\"", "\"device\":\"\"")),
            "fragments[0].device must be a non-empty string");
}

TEST_F(BindingTest, WireRejectsFactoryViolationsWithContext) {
  const RuntimeBindingFragment& f = bindings_[0].fragments()[0];
  EXPECT_EQ(DecodeError(Patched("\"address\":65536", "\"address\":65537")),
            "fragments[0]: runtime fragment for placement fragment " +
                f.placement_fragment_id() +
                ": address must equal storage_address + "
                "storage_offset_bytes");
  std::string upper = placement().digest();
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  EXPECT_EQ(DecodeError(Patched(placement().digest(), upper)),
            "runtime binding placement_digest must be a lowercase SHA-256 "
            "digest (64 hex characters)");
}

}  // namespace
}  // namespace reshard

namespace reshard {
namespace {

TEST(BindingFixesTest, StrideOverflowIsRejectedNotUndefined) {
  RuntimeBindingFragmentSpec s;
  s.placement_fragment_id = "f";
  s.runtime_fragment_id = "rt-f";
  s.address = 4096;
  s.nbytes = 16;
  s.worker_id = "w";
  s.endpoint = "e";
  s.device = "cpu";
  s.itemsize = 4;
  s.local_shape = {2, int64_t{1} << 62, 4};
  s.strides_bytes = {64, 16, 4};
  s.storage_address = 4096;
  s.storage_nbytes = 16;
  EXPECT_EQ(RuntimeBindingFragment::Make(s).status().message(),
            "runtime fragment for placement fragment f: local_shape byte "
            "strides must fit in a signed 64-bit integer");
}

TEST(BindingFixesTest, CanonicalFragmentIdSortsAliases) {
  PlacementFragmentSpec a{.tensor_id = "w",
                          .global_offset = {0},
                          .local_shape = {4},
                          .nbytes = 4,
                          .aliases = {"z", "w"}};
  PlacementFragmentSpec b = a;
  b.aliases = {"w", "z"};
  EXPECT_EQ(CanonicalPlacementFragmentId(a), CanonicalPlacementFragmentId(b));
  EXPECT_EQ(PlacementFragment::Make(a)->placement_fragment_id(),
            CanonicalPlacementFragmentId(a));
}

TEST(MemoryKindTest, DevicesNameTheirMemoryKind) {
  EXPECT_EQ(*MemoryKindOfDevice("cpu"), MemoryKind::kHost);
  EXPECT_EQ(*MemoryKindOfDevice("cuda"), MemoryKind::kCuda);
  EXPECT_EQ(*MemoryKindOfDevice("cuda:0"), MemoryKind::kCuda);
  EXPECT_EQ(*MemoryKindOfDevice("cuda:15"), MemoryKind::kCuda);
  for (const char* bad :
       {"CPU", "cpu:0", "cuda:", "cuda:01", "cuda:-1", "cuda:1x",
        "cuda:1234567890", "npu:0", "gpu", " cpu"}) {
    auto k = MemoryKindOfDevice(bad);
    ASSERT_FALSE(k.ok()) << bad;
    EXPECT_EQ(k.status().message(),
              std::string("unsupported runtime fragment device \"") + bad +
                  "\" (known: cpu, cuda, cuda:<ordinal>)");
  }
  EXPECT_EQ(MemoryKindName(MemoryKind::kHost), "host");
  EXPECT_EQ(MemoryKindName(MemoryKind::kCuda), "cuda");
}

}  // namespace
}  // namespace reshard
