// `reshard store ls|show|verify|rm|gc URI ...`: inspect and maintain a
// weight store (verify, rm and gc draw --progress).

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "reshard/weight_store.h"
#include "tools/cli_common.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "util/canonical_json.h"
#include "util/printable.h"

namespace reshard::cli {
namespace {

struct StoreArgs {
  std::string uri, key, prefix = "weights";
  bool json = false;
  double grace = 3600;
  ProgressMode progress = ProgressMode::kAuto;
};

// Whether a subcommand takes a MANIFEST_KEY after the URI.
enum class ManifestKeyArg { kNone, kOptional, kRequired };

Result<WeightStore> OpenStore(const StoreArgs& a) {
  WeightStoreOptions o;
  o.key_prefix = a.prefix;
  o.gc_grace = std::chrono::seconds(static_cast<int64_t>(a.grace));
  // Every store subcommand works on an existing store; none creates one.
  return OpenExistingStore(a.uri, o);
}

// Adds a subcommand with URI, an optional or required MANIFEST_KEY, --json
// and --prefix (and --grace for gc); `run` prints and returns the status.
CLI::App* Sub(CLI::App* store, const char* name, const char* help,
              ManifestKeyArg key_arg,
              std::function<Status(const StoreArgs&)> run) {
  auto a = std::make_shared<StoreArgs>();
  auto* cmd = store->add_subcommand(name, help);
  cmd->add_option("URI", a->uri, "store URI (fs://DIR)")->required();
  if (key_arg != ManifestKeyArg::kNone) {
    auto* k = cmd->add_option("MANIFEST_KEY", a->key,
                              "revision manifest key (see `store ls`)");
    if (key_arg == ManifestKeyArg::kRequired) k->required();
  }
  cmd->add_option("--prefix", a->prefix, "key prefix (default weights)");
  cmd->add_flag("--json", a->json, "print JSON");
  if (std::string(name) == "gc") {
    cmd->add_option("--grace", a->grace,
                    "seconds after which an undecided upload is abandoned "
                    "(default 3600)")
        ->check(CLI::NonNegativeNumber);
  }
  const std::string sub = name;
  if (sub == "verify" || sub == "rm" || sub == "gc") {
    AddProgressOption(cmd, &a->progress);
  }
  cmd->callback([a, run]() {
    Status st = run(*a);
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
  });
  return cmd;
}

// ---- store ls

// Each revision's fields (VisitFields, weight_store.h), as Python's ls();
// strings as they are.
std::string RevisionsJson(const std::vector<RevisionInfo>& revs) {
  std::string out;
  internal::CanonicalJsonWriter w(&out, internal::JsonAscii::kRawUtf8);
  WriteFieldValue(&w, "revisions", revs);
  return out;
}

void PrintRevisions(const std::vector<RevisionInfo>& revs) {
  std::printf("%-9s %10s %14s %6s  %s\n", "state", "fragments", "bytes",
              "leases", "manifest_key");
  for (const auto& r : revs) {
    if (!r.error.empty()) {
      std::printf("%-9s %10s %14s %6s  %s  (%s)\n", r.state.c_str(), "-", "-",
                  "-", r.manifest_key.c_str(), r.error.c_str());
      continue;
    }
    std::printf("%-9s %10llu %14llu %6u  %s\n", r.state.c_str(),
                static_cast<unsigned long long>(r.fragments),
                static_cast<unsigned long long>(r.bytes), r.leases,
                r.manifest_key.c_str());
  }
}

Status RunList(const StoreArgs& a) {
  RESHARD_ASSIGN_OR_RETURN(auto s, OpenStore(a));
  RESHARD_ASSIGN_OR_RETURN(auto revs, s.List());
  if (a.json) {
    std::cout << RevisionsJson(revs) << "\n";
  } else {
    PrintRevisions(revs);
  }
  return Status::OK();
}

// ---- store show

uint64_t TotalBytes(const StoredWeightManifest& m) {
  uint64_t bytes = 0;
  for (const auto& f : m.fragments()) bytes += f.nbytes;
  return bytes;
}

// Ids come from the manifest: shown escaped.
void PrintManifestSummary(const StoredWeightManifest& m) {
  std::printf("revision %s (%s@%s, generation %llu)\n",
              m.manifest_key().c_str(),
              internal::Printable(m.resource_id()).c_str(),
              internal::Printable(m.revision()).c_str(),
              static_cast<unsigned long long>(m.weight_generation()));
  std::printf("  tensors %zu, fragments %zu, bytes %llu\n", m.tensors().size(),
              m.fragments().size(),
              static_cast<unsigned long long>(TotalBytes(m)));
  std::printf("  created %s, digest %s\n",
              internal::Printable(m.created_at()).c_str(),
              m.manifest_digest().c_str());
}

Status RunShow(const StoreArgs& a) {
  RESHARD_ASSIGN_OR_RETURN(auto s, OpenStore(a));
  RESHARD_ASSIGN_OR_RETURN(auto m, s.ReadManifest(a.key));
  if (a.json) {
    // The revision's summary fields (VisitFields, stored_manifest.h).
    std::cout << RecordJson(m, {}, {}, internal::JsonAscii::kRawUtf8) << "\n";
  } else {
    PrintManifestSummary(m);
  }
  return Status::OK();
}

// ---- store verify

// A revision that did not verify, and why.
struct CorruptRevision {
  std::string manifest_key;
  std::string error;
};

template <typename Visit>
void VisitFields(const CorruptRevision& c, Visit&& visit) {
  visit("error", c.error);
  visit("manifest_key", c.manifest_key);
}

// Totals over the revisions that verified, and each one that did not.
struct VerifyOutcome {
  uint64_t revisions = 0;
  VerifyReport total;
  std::vector<std::pair<std::string, Status>> corrupt;
};

// What `store verify --json` prints: the totals (a VerifyReport's fields,
// as Python's verify() of one revision), each corrupt revision, the
// revisions checked and whether every one verified.
template <typename Visit>
void VisitFields(const VerifyOutcome& v, Visit&& visit) {
  VisitFields(v.total, visit);
  std::vector<CorruptRevision> corrupt;
  for (const auto& [key, status] : v.corrupt) {
    corrupt.push_back({key, status.message()});
  }
  visit("corrupt", corrupt);
  visit("revisions", v.revisions);
  visit("verified", v.corrupt.empty());
}

// The revision named on the command line, or every READY and CORRUPT one.
Result<std::vector<std::string>> RevisionsToVerify(WeightStore& s,
                                                   const StoreArgs& a) {
  std::vector<std::string> keys;
  if (!a.key.empty()) {
    keys.push_back(a.key);
    return keys;
  }
  RESHARD_ASSIGN_OR_RETURN(auto revs, s.List());
  for (const auto& r : revs) {
    if (r.state != "IMPORTING") keys.push_back(r.manifest_key);
  }
  return keys;
}

// Verifies every revision of `keys`; without --json, one line per revision
// that verified.
VerifyOutcome VerifyRevisions(WeightStore& s,
                              const std::vector<std::string>& keys,
                              const StoreArgs& a) {
  VerifyOutcome out;
  out.revisions = keys.size();
  for (const auto& k : keys) {
    ProgressLine line("verifying " + k, a.progress);
    WeightStoreOptions options = s.options();
    options.progress = line.Callback();
    auto r = s.WithOptions(std::move(options)).Verify(k);
    line.Finish();
    if (!r.ok()) {
      out.corrupt.emplace_back(k, r.status());
      continue;
    }
    out.total.objects += r->objects;
    out.total.bytes += r->bytes;
    out.total.chunks += r->chunks;
    if (!a.json) {
      std::printf("ok  %s: %llu objects, %llu bytes, %llu chunks\n", k.c_str(),
                  static_cast<unsigned long long>(r->objects),
                  static_cast<unsigned long long>(r->bytes),
                  static_cast<unsigned long long>(r->chunks));
    }
  }
  return out;
}

Status RunVerify(const StoreArgs& a) {
  RESHARD_ASSIGN_OR_RETURN(auto s, OpenStore(a));
  RESHARD_ASSIGN_OR_RETURN(auto keys, RevisionsToVerify(s, a));
  const VerifyOutcome v = VerifyRevisions(s, keys, a);
  if (a.json) std::cout << RecordJson(v) << "\n";
  std::cout.flush();
  std::fflush(stdout);
  if (v.corrupt.empty()) return Status::OK();
  // One error line per corrupt revision: all but the last here, the last
  // as the command's status.
  for (size_t i = 0; i + 1 < v.corrupt.size(); ++i) Fail(v.corrupt[i].second);
  return v.corrupt.back().second;
}

// ---- store rm

Status RunRemove(const StoreArgs& a) {
  RESHARD_ASSIGN_OR_RETURN(auto s, OpenStore(a));
  ProgressLine line("removing " + a.key, a.progress, "keys");
  WeightStoreOptions options = s.options();
  options.progress = line.Callback();
  RESHARD_RETURN_NOT_OK(s.WithOptions(std::move(options)).Remove(a.key));
  line.Finish();
  if (!a.json) std::printf("removed %s\n", a.key.c_str());
  return Status::OK();
}

// ---- store gc

void PrintGc(const GcReport& r) {
  std::printf("gc: removed %llu keys (%llu bytes) of %zu uploads\n",
              static_cast<unsigned long long>(r.keys_removed),
              static_cast<unsigned long long>(r.bytes_removed),
              r.transactions_removed.size());
  for (const auto& p : r.skipped) {
    std::printf("gc: skipped %s: %s\n", p.key.c_str(), p.error.c_str());
  }
}

Status RunGc(const StoreArgs& a) {
  RESHARD_ASSIGN_OR_RETURN(auto s, OpenStore(a));
  ProgressLine line("collecting " + a.uri, a.progress, "uploads");
  WeightStoreOptions options = s.options();
  options.progress = line.Callback();
  RESHARD_ASSIGN_OR_RETURN(auto r, s.WithOptions(std::move(options)).Gc());
  line.Finish();
  if (a.json) {
    // GcReport's fields (as Python's gc()); strings as they are.
    std::cout << RecordJson(r, {}, {}, internal::JsonAscii::kRawUtf8) << "\n";
  } else {
    PrintGc(r);
  }
  return Status::OK();
}

}  // namespace

void AddStoreCommand(CLI::App& app) {
  auto* store =
      app.add_subcommand("store", "Inspect and maintain a weight store");
  store->require_subcommand(1);
  // `list` and `remove` are the library's names (WeightStore::List,
  // Remove; Python's list and remove): aliases of the established ls, rm.
  Sub(store, "ls", "List revisions (READY or IMPORTING)", ManifestKeyArg::kNone,
      RunList)
      ->alias("list");
  Sub(store, "show", "Show one revision's manifest summary",
      ManifestKeyArg::kRequired, RunShow);
  Sub(store, "verify",
      "Re-read every payload and check every checksum (all READY and "
      "CORRUPT revisions without MANIFEST_KEY); every revision is checked, "
      "each corrupt one is one error line, and any makes the exit status 1",
      ManifestKeyArg::kOptional, RunVerify);
  Sub(store, "rm",
      "Remove a revision, also a corrupt one, and only keys under it (refused "
      "while a load holds a lease)",
      ManifestKeyArg::kRequired, RunRemove)
      ->alias("remove");
  Sub(store, "gc",
      "Remove payloads of aborted and abandoned uploads (never anything a "
      "published revision references; corrupt revisions are left alone and "
      "reported)",
      ManifestKeyArg::kNone, RunGc);
}

}  // namespace reshard::cli
