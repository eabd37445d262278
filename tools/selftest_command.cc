// `reshard selftest SOURCE.json TARGET.json [--transport local|ucx|inproc]
//  [--threads N] [--procs N] [--rendezvous DIR] [--rank R] [--updates K]
//  [--inject-fault FAULT] [--json]`.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <iostream>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "reshard/placement.h"
#include "reshard/sdk/peer_exchange.h"
#include "selftest/selftest.h"
#include "tools/cli_common.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "util/canonical_json.h"

namespace reshard::cli {
namespace {

struct SelftestArgs {
  std::string source, target, transport = "local";
  uint32_t threads = 1;
  bool json = false;
  bool keep_revision = false;
  uint32_t procs = 2;
  std::string rendezvous, session, fault = "none";
  std::string protocol = "auto", via_store;
  uint32_t max_in_flight = 64;
  uint32_t updates = 0;  // 0: one RunLiveReshard
  bool convert = false;
  bool delta = false;
  bool no_verify = false;
  std::string change_fraction = "1";  // as given: NumberFlag checks it
  Fp8Block block;
  std::optional<uint32_t> rank;
  std::vector<std::string> exchange_options;  // NAME=VALUE
  // The registered exchanges' own flags (--<exchange>-<setting>), as given.
  struct ExchangeFlag {
    std::string flag, exchange, setting, value;
  };
  std::list<ExchangeFlag> exchange_flags;  // stable addresses for CLI11
  std::string timeout = "60";              // as given: NumberFlag checks it
  ProgressMode progress = ProgressMode::kAuto;

  // A run of ranks in processes of their own (not threads of this one, not
  // a store round trip).
  bool multi_process_run() const {
    return transport == "ucx" && via_store.empty();
  }
  bool store_run() const { return !via_store.empty(); }
};

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// --transport: "local" or a registered peer exchange; the error lists
// them.
CLI::Validator TransportCheck() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (value == "local") return "";
        for (const std::string& name : RegisteredPeerExchanges()) {
          if (value == name) return "";
        }
        return "unknown transport " + value +
               " (local, or a registered peer exchange: " +
               JoinNames(RegisteredPeerExchanges()) + ")";
      },
      "TRANSPORT");
}

// Every registered exchange's flags (PeerExchangeBackend::flags), as
// --<exchange>-<setting>.
void AddExchangeFlags(CLI::App* cmd, SelftestArgs* a) {
  for (const std::string& name : RegisteredPeerExchanges()) {
    const PeerExchangeBackend* backend = FindPeerExchange(name).ValueOrDie();
    for (const PeerExchangeFlag& f : backend->flags) {
      std::string flag = "--" + name + "-" + f.setting;
      std::replace(flag.begin(), flag.end(), '_', '-');
      auto& given = a->exchange_flags.emplace_back(
          SelftestArgs::ExchangeFlag{flag, name, f.setting, ""});
      CLI::Option* option =
          cmd->add_option(flag, given.value, name + ": " + f.help);
      if (!f.choices.empty()) option->check(CLI::IsMember(f.choices));
    }
  }
}

void AddSelftestOptions(CLI::App* cmd, SelftestArgs* a) {
  cmd->add_option("SOURCE", a->source, "source placement (JSON)")->required();
  cmd->add_option("TARGET", a->target, "target placement (JSON)")->required();
  cmd->add_option("--transport", a->transport,
                  "executor: local, or a registered peer exchange (" +
                      JoinNames(RegisteredPeerExchanges()) + ")")
      ->check(TransportCheck());
  cmd->add_option("--threads", a->threads, "copy threads")
      ->check(CLI::Range(1u, 1024u));
  cmd->add_flag("--json", a->json, "print one JSON object");
  AddProgressOption(cmd, &a->progress);
  cmd->add_option("--procs", a->procs,
                  "ucx: processes (sources on the first half, targets on "
                  "the second; at most 64, and at most one per participant "
                  "with fragments)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--rendezvous", a->rendezvous,
                  "ucx: rendezvous shared by every rank, a directory or "
                  "fs://DIR (default: a temporary directory)");
  cmd->add_option("--session", a->session, "ucx: session key");
  cmd->add_option("--rank", a->rank,
                  "ucx: run only this rank here (needs --rendezvous and "
                  "--session; the others run elsewhere)");
  cmd->add_option("--timeout", a->timeout,
                  "ucx: seconds to wait for any peer, 0.001 to 86400 "
                  "(default 60); the launcher ends ranks still running after "
                  "3 x timeout x (1 + updates)");
  cmd->add_option("--exchange-option", a->exchange_options,
                  "NAME=VALUE: a setting of the peer exchange, as its "
                  "backend states them (repeatable; for ucx, --ucx-tls T is "
                  "--exchange-option tls=T)");
  AddExchangeFlags(cmd, a);
  cmd->add_option("--ucx-protocol", a->protocol,
                  "ucx: push (sources send tagged messages), pull "
                  "(targets read with RMA get) or auto (pull on one host "
                  "with UCX's own transports, else push)")
      ->check(CLI::IsMember({"auto", "push", "pull"}));
  cmd->add_option("--max-in-flight", a->max_in_flight,
                  "ucx: send operations in flight per process")
      ->check(CLI::Range(1u, 65536u));
  cmd->add_option("--via-store", a->via_store,
                  "upload the source layout to this weight store (fs://DIR), "
                  "commit, load into the target layout, check every byte");
  cmd->add_flag("--keep-revision", a->keep_revision,
                "with --via-store: keep the revision afterwards");
  cmd->add_option(
         "--inject-fault", a->fault,
         "failure-path tests: kill-source, kill-target, stale-generation "
         "(ucx), kill-between-updates (ucx, --updates 2+), corrupt-message "
         "(one "
         "byte a target rank received in update 2 flipped: update 2 fails "
         "on every rank, the session goes on; --updates 3+, --procs 2+) or "
         "restart-rank (ucx: the first target rank dies after update 2 and "
         "a new process rejoins in its place; --updates 3+, --procs 2+)")
      ->check(CLI::IsMember({"none", "kill-source", "kill-target",
                             "stale-generation", "kill-between-updates",
                             "corrupt-message", "restart-rank"}));
  cmd->add_option("--updates", a->updates,
                  "ucx: open one standing session and run K updates, the "
                  "source pattern changing with each, every byte checked")
      ->check(CLI::Range(1u, 1000000u));
  cmd->add_flag("--convert", a->convert,
                "convert tensors whose dtype differs (casts, FP8 block "
                "quantization at the source, dequantization; "
                "docs/conversion.md); converted targets are checked against "
                "the pattern converted");
  AddBlockOption(cmd, &a->block);
  cmd->add_flag("--delta", a->delta,
                "ucx --updates: delta updates (after the first, only changed "
                "elements travel; docs/live.md)");
  cmd->add_flag("--no-verify", a->no_verify,
                "live: do not check received regions against their source's "
                "hashes (on by default; docs/live.md, \"Verified on "
                "arrival\")");
  cmd->add_option("--change-fraction", a->change_fraction,
                  "ucx --updates: each update from the second on changes "
                  "this fraction of the source elements (deterministic), in "
                  "[0, 1]; default 1");
}

// Flag combinations CLI11 cannot express: UCX-only flags need --transport
// ucx, and --via-store runs in one process.
constexpr double kMinTimeoutSeconds = 0.001;
constexpr double kMaxTimeoutSeconds = 86400;

Status ValidateSelftestArgs(const SelftestArgs& a, const CLI::App& cmd) {
  if (a.rank && a.session.empty()) {
    return Status::InvalidArgument("--rank needs --session");
  }
  // A live run over a peer exchange (ucx, or inproc: ranks as threads).
  const bool live = a.transport != "local";
  for (const char* flag :
       {"--procs", "--rendezvous", "--session", "--rank", "--ucx-protocol",
        "--max-in-flight", "--inject-fault", "--updates", "--delta",
        "--no-verify", "--change-fraction", "--exchange-option"}) {
    if (!live && cmd.count(flag) > 0) {
      return Status::InvalidArgument(std::string(flag) +
                                     " needs --transport ucx");
    }
  }
  // An exchange's own flags need that exchange.
  for (const SelftestArgs::ExchangeFlag& f : a.exchange_flags) {
    if (a.transport != f.exchange && cmd.count(f.flag) > 0) {
      return Status::InvalidArgument(f.flag + " needs --transport " +
                                     f.exchange);
    }
  }
  if (live && !a.via_store.empty()) {
    return Status::InvalidArgument(
        "--via-store runs in one process; drop --transport " + a.transport);
  }
  if (a.keep_revision && a.via_store.empty()) {
    return Status::InvalidArgument("--keep-revision needs --via-store");
  }
  // Finite and in range: nan or 1e300 would overflow the milliseconds.
  RESHARD_RETURN_NOT_OK(NumberFlag("--timeout", a.timeout, kMinTimeoutSeconds,
                                   kMaxTimeoutSeconds,
                                   "a number of seconds from 0.001 to 86400")
                            .status());
  if (cmd.count("--block") > 0 && !a.convert) {
    return Status::InvalidArgument("--block needs --convert");
  }
  if ((a.delta || cmd.count("--change-fraction") > 0) && a.updates == 0) {
    return Status::InvalidArgument(
        "--delta and --change-fraction need --updates K");
  }
  RESHARD_RETURN_NOT_OK(NumberFlag("--change-fraction", a.change_fraction, 0, 1,
                                   "a number from 0 to 1")
                            .status());
  if (a.fault == "kill-between-updates" && a.updates < 2) {
    return Status::InvalidArgument(
        "--inject-fault kill-between-updates needs --updates 2 or more");
  }
  return Status::OK();
}

// The exchange's settings: its own flags that were given, in the order
// it lists them, then every --exchange-option in order.
PeerExchangeOptions ExchangeOptionsOf(const SelftestArgs& a,
                                      const CLI::App& cmd) {
  PeerExchangeOptions out;
  for (const SelftestArgs::ExchangeFlag& f : a.exchange_flags) {
    if (f.exchange == a.transport && cmd.count(f.flag) > 0) {
      out.Set(f.setting, f.value);
    }
  }
  for (const std::string& setting : a.exchange_options) {
    const size_t eq = setting.find('=');
    out.Set(setting.substr(0, eq),
            eq == std::string::npos ? "" : setting.substr(eq + 1));
  }
  return out;
}

SelfTestOptions ToSelfTestOptions(const SelftestArgs& a, const CLI::App& cmd) {
  SelfTestOptions options;
  options.transport = a.transport;
  options.threads = a.threads;
  options.procs = a.procs;
  options.rendezvous = a.rendezvous;
  options.session = a.session;
  options.rank = a.rank;
  options.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(ParseFiniteNumber(a.timeout).value() * 1000));
  options.max_in_flight = a.max_in_flight;
  options.via_store = a.via_store;
  options.keep_revision = a.keep_revision;
  if (a.protocol == "pull") options.protocol = LiveProtocol::kPull;
  if (a.protocol == "push") options.protocol = LiveProtocol::kPush;
  options.exchange_options = ExchangeOptionsOf(a, cmd);
  if (a.fault == "kill-source") options.fault = SelfTestFault::kKillSource;
  if (a.fault == "kill-target") options.fault = SelfTestFault::kKillTarget;
  if (a.fault == "stale-generation") {
    options.fault = SelfTestFault::kStaleGeneration;
  }
  if (a.fault == "kill-between-updates") {
    options.fault = SelfTestFault::kKillBetweenUpdates;
  }
  if (a.fault == "corrupt-message") {
    options.fault = SelfTestFault::kCorruptMessage;
  }
  if (a.fault == "restart-rank") options.fault = SelfTestFault::kRestartRank;
  options.updates = a.updates;
  options.convert = a.convert;
  options.fp8_block = a.block;
  options.delta = a.delta;
  options.verify = !a.no_verify;
  options.change_fraction = ParseFiniteNumber(a.change_fraction).value();
  return options;
}

// The self-test's phases (fill, transfer, verify; update k of K), each a
// progress line of its own on stderr (--progress).
class PhaseProgress {
 public:
  explicit PhaseProgress(ProgressMode mode) : mode_(mode) {}

  void Update(std::string_view phase, double fraction) {
    if (line_ == nullptr || phase != phase_) {
      line_.reset();  // ends the previous phase's line
      phase_ = std::string(phase);
      line_ = std::make_unique<ProgressLine>("selftest " + phase_, mode_);
    }
    line_->UpdateFraction(fraction);
  }
  // Ends the last phase's line.
  void Finish() { line_.reset(); }

 private:
  ProgressMode mode_;
  std::string phase_;
  std::unique_ptr<ProgressLine> line_;
};

// Loads both placements, checks the flags and runs the self-test, with a
// progress bar on a terminal (not with --json).
Result<SelfTestReport> RunSelftest(const SelftestArgs& a, const CLI::App& cmd) {
  // The target decodes on a second core while the source does here
  // (validating a trillion-parameter layout is CPU-bound); errors keep
  // their order: the source's first. Standard input is read by one
  // thread at a time (deferred: after the source).
  const bool stdin_used = a.source == "-" || a.target == "-";
  auto target =
      std::async(stdin_used ? std::launch::deferred : std::launch::async,
                 [&a] { return LoadPlacement(a.target); });
  RESHARD_ASSIGN_OR_RETURN(auto src, LoadPlacement(a.source));
  RESHARD_ASSIGN_OR_RETURN(auto dst, target.get());
  RESHARD_RETURN_NOT_OK(ValidateSelftestArgs(a, cmd));
  SelfTestOptions options = ToSelfTestOptions(a, cmd);
  PhaseProgress progress(a.progress);
  if (ProgressEnabled(a.progress)) {
    options.progress = [&progress](std::string_view phase, double fraction) {
      progress.Update(phase, fraction);
    };
  }
  // UCX logs to stdout unless told otherwise; while it runs here (a
  // --rank run; forked ranks redirect their own), stdout goes to stderr so
  // that it carries only the report.
  std::fflush(stdout);
  const int saved_stdout = a.transport == "ucx" ? ::dup(STDOUT_FILENO) : -1;
  if (saved_stdout >= 0) ::dup2(STDERR_FILENO, STDOUT_FILENO);
  auto report = RunSelfTest(src, dst, options);
  if (saved_stdout >= 0) {
    std::fflush(stdout);
    ::dup2(saved_stdout, STDOUT_FILENO);
    ::close(saved_stdout);
  }
  progress.Finish();
  return report;
}

void PrintSelftest(const SelftestArgs& a, const SelfTestReport& r) {
  std::printf("selftest: %s\n",
              r.verified ? "every target byte verified" : "MISMATCH");
  std::printf("  %-26s %14llu\n", "bytes moved",
              static_cast<unsigned long long>(r.bytes));
  std::printf("  %-26s %14llu\n", "operations",
              static_cast<unsigned long long>(r.operations));
  if (a.multi_process_run()) {
    std::printf("  %-26s %14u\n", "processes", a.procs);
    std::printf("  %-26s %14llu\n", "UCX messages",
                static_cast<unsigned long long>(r.messages));
    std::printf("  %-26s %14u\n", "ranks activation-ready", r.ranks_ready);
    if (!r.wire_bytes.empty()) {
      std::printf("  %-26s %14llu\n", "bytes between processes",
                  static_cast<unsigned long long>(r.wire_bytes.back()));
    }
  }
  std::printf("  %-26s %14.4f s\n", "plan + bind", r.plan_seconds);
  if (a.updates > 0) {
    const auto fixed = SelfTestFixedSeconds(r);
    std::printf("  %-26s %14.4f s\n", "session open", r.open_seconds);
    std::printf("  %-26s %14u\n", "updates", a.updates);
    std::printf("  %-26s %14zu\n", "failed updates", r.failed_updates.size());
    for (const std::string& f : r.failures) std::printf("    %s\n", f.c_str());
    std::printf("  %-26s %14llu\n", "sessions opened",
                static_cast<unsigned long long>(r.opens));
    std::printf("  %-26s %14llu\n", "ranks rejoined",
                static_cast<unsigned long long>(r.rejoins));
    double worst = 0;
    for (double f : fixed) worst = std::max(worst, f);
    std::printf("  %-26s %14.4f s\n", "worst fixed cost per update", worst);
  }
  if (a.store_run()) {
    std::printf("  %-26s %14.4f s\n", "upload + commit", r.upload_seconds);
    std::printf("  %-26s %14.4f s\n", "load", r.load_seconds);
  }
  std::printf("  %-26s %14.4f s\n", "transfer", r.seconds);
  std::printf("  %-26s %14.2f GB/s\n", "reshard bandwidth", SelfTestGbps(r));
  std::printf("  %-26s %14.2f GB/s\n", "memcpy (same run)", r.memcpy_gbps);
}

}  // namespace

void AddSelftestCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "selftest",
      "Reshard real host buffers between two layouts and check every byte");
  auto a = std::make_shared<SelftestArgs>();
  AddSelftestOptions(cmd, a.get());
  cmd->callback([a, cmd]() {
    auto report = RunSelftest(*a, *cmd);
    if (!report.ok()) throw CLI::RuntimeError(Fail(report.status()));
    if (a->json) {
      // The report's fields for its kind of run (VisitFields, selftest.h).
      std::cout << RecordJson(*report) << "\n";
    } else {
      PrintSelftest(*a, *report);
    }
    if (!report->verified) {
      throw CLI::RuntimeError(
          Fail(Status::DataLoss("selftest mismatch: " + report->mismatch)));
    }
  });
}

}  // namespace reshard::cli
