// Live (UCX) benchmark: reshard a [d0, 4096, 4096] uint8 tensor between
// two processes (sources on one, targets on the other) and compare with
// ucx_perftest's tag bandwidth for the same transport and message size,
// measured in the same run.
//
// Usage: reshard_bench_live [--d0 N] [--perftest PATH] [--only NAME]
//                           [--max-in-flight N] [--push|--pull]

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_stats.h"
#include "reshard/plan.h"
#include "selftest/selftest.h"
#include "testing/placement_builders.h"

namespace {

using namespace reshard;  // NOLINT

WeightPlacementManifest Layout(int64_t tp, int64_t dim, int64_t d0) {
  return testing::CubeLayout(tp, dim, {d0, 4096, 4096});
}

// Runs `cmd` and returns its standard output.
std::string Capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

// ucx_perftest tag_bw between two local processes: overall GB/s (10^9),
// or 0 when it did not run.
double PerftestGbps(const std::string& perftest, const std::string& env,
                    uint64_t size, uint64_t iterations, int port) {
  const std::string args = " -p " + std::to_string(port) + " -t tag_bw -s " +
                           std::to_string(size) + " -n " +
                           std::to_string(iterations) + " -w 2";
  const std::string server = env + " " + perftest + args + " >/dev/null 2>&1 &";
  if (std::system(server.c_str()) != 0) return 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::string out =
      Capture(env + " " + perftest + " 127.0.0.1" + args + " 2>/dev/null");
  const size_t at = out.find("Final:");
  if (at == std::string::npos) return 0;
  // Final: iters, latency typical/average/overall, bandwidth average,
  // bandwidth overall (MB/s meaning MiB/s), message rates.
  double v[7] = {};
  if (std::sscanf(out.c_str() + at, "Final: %lf %lf %lf %lf %lf %lf", &v[0],
                  &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) {
    return 0;
  }
  return v[5] * 1048576.0 / 1e9;
}

struct Args {
  int64_t d0 = 32;
  std::string perftest = "ucx_perftest";
  std::string only;  // run only the transport with this name prefix
  uint32_t window = 64;
  std::vector<LiveProtocol> protocols = {LiveProtocol::kPush,
                                         LiveProtocol::kPull};
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--d0") && i + 1 < argc) {
      a.d0 = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--perftest") && i + 1 < argc) {
      a.perftest = argv[++i];
    } else if (!std::strcmp(argv[i], "--pull")) {
      a.protocols = {LiveProtocol::kPull};
    } else if (!std::strcmp(argv[i], "--push")) {
      a.protocols = {LiveProtocol::kPush};
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      a.only = argv[++i];
    } else if (!std::strcmp(argv[i], "--max-in-flight") && i + 1 < argc) {
      a.window = std::atoi(argv[++i]);
    }
  }
  return a;
}

// A UCX transport selection (UCX_TLS, UCX_NET_DEVICES; empty: default).
struct TransportCase {
  const char* name;
  const char* tls;
  const char* devices;
};
constexpr TransportCase kTransports[] = {
    {"shared memory (UCX default)", "", ""},
    {"cma,tcp", "cma,tcp", "lo"},
    {"tcp loopback", "tcp", "lo"}};

struct Case {
  const char* name;
  int64_t src_tp, src_dim, dst_tp, dst_dim;
};
constexpr Case kCases[] = {{"TP4 -> TP8 dim 0 (contiguous)", 4, 0, 8, 0},
                           {"TP4 dim 0 -> TP4 dim 2", 4, 0, 4, 2}};

// ucx_perftest's GB/s, one run per transport and message size.
class PerftestBaseline {
 public:
  explicit PerftestBaseline(std::string perftest)
      : perftest_(std::move(perftest)),
        port_(13500 + static_cast<int>(::getpid() % 1000)) {}

  double Gbps(const std::string& env, uint64_t msg, uint64_t iterations) {
    const std::string key = env + "/" + std::to_string(msg);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    return cache_[key] = PerftestGbps(perftest_, env, msg, iterations, port_++);
  }

 private:
  std::string perftest_;
  int port_;
  std::map<std::string, double> cache_;
};

// The bandwidths of kMinRounds verified self-test runs.
struct Measured {
  std::vector<double> gbps;
  uint64_t operations = 0;
};

Result<Measured> Rounds(const WeightPlacementManifest& src,
                        const WeightPlacementManifest& dst,
                        const SelfTestOptions& o) {
  Measured m;
  for (int rep = 0; rep < bench::kMinRounds; ++rep) {
    RESHARD_ASSIGN_OR_RETURN(SelfTestReport r, RunSelfTest(src, dst, o));
    if (!r.verified) return Status::DataLoss(r.mismatch);
    m.gbps.push_back(r.bytes / r.seconds / 1e9);
    m.operations = r.operations;
  }
  return m;
}

void PrintHeader(int64_t d0) {
  std::printf(
      "live executor over UCX, 2 processes, [%lld, 4096, 4096] uint8 "
      "(%.2f GB)\n",
      static_cast<long long>(d0), d0 * 4096.0 * 4096.0 / 1e9);
  std::printf("%-28s %-30s %-5s %5s %8s %7s %13s %s\n", "transport", "case",
              "mode", "ops", "msg MiB", "GB/s", "perftest GB/s",
              "ratio (min / median / max of rounds; GB/s: median)");
}

// One row: the case over one transport and protocol, next to perftest's
// bandwidth for the same message size (contiguous cases only).
Status RunCase(const Args& args, const TransportCase& t, const Case& c,
               LiveProtocol protocol, PerftestBaseline* perftest) {
  auto src = Layout(c.src_tp, c.src_dim, args.d0);
  auto dst = Layout(c.dst_tp, c.dst_dim, args.d0);
  RESHARD_ASSIGN_OR_RETURN(auto plan, LogicalTransferPlan::Make(src, dst));
  const uint64_t msg = plan.summary().bytes / plan.summary().regions;
  SelfTestOptions o;
  o.transport = "ucx";
  o.procs = 2;
  // The exchange's settings by name (reshard/backends/ucx_options.h).
  if (*t.tls) o.exchange_options.Set("tls", t.tls);
  if (*t.devices) o.exchange_options.Set("net_devices", t.devices);
  o.measure_memcpy = false;
  o.max_in_flight = args.window;
  o.protocol = protocol;
  RESHARD_ASSIGN_OR_RETURN(Measured m, Rounds(src, dst, o));
  const bench::Spread g = bench::SpreadOf(m.gbps);
  std::string env;
  if (*t.tls) env += std::string("UCX_TLS=") + t.tls;
  if (*t.devices) env += std::string(" UCX_NET_DEVICES=") + t.devices;
  const uint64_t iterations = std::max<uint64_t>(8, plan.summary().bytes / msg);
  const double perf =
      c.src_dim == c.dst_dim ? perftest->Gbps(env, msg, iterations) : 0;
  // perftest's figure is its own (steady) average, cached per message
  // size; the ratios are the rounds' against it.
  char ratio[48] = "-";
  if (perf > 0) {
    std::snprintf(ratio, sizeof ratio, "%.2f / %.2f / %.2fx", g.min / perf,
                  g.median / perf, g.max / perf);
  }
  std::printf("%-28s %-30s %-5s %5llu %8.1f %7.2f %13.2f %s\n", t.name, c.name,
              protocol == LiveProtocol::kPull ? "pull" : "push",
              static_cast<unsigned long long>(m.operations), msg / 1048576.0,
              g.median, perf, ratio);
  std::fflush(stdout);
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  PrintHeader(args.d0);
  PerftestBaseline perftest(args.perftest);
  for (const TransportCase& t : kTransports) {
    if (!std::string(t.name).starts_with(args.only)) continue;
    for (const Case& c : kCases) {
      for (const LiveProtocol protocol : args.protocols) {
        Status st = RunCase(args, t, c, protocol, &perftest);
        if (!st.ok()) {
          std::fprintf(stderr, "%s\n", st.message().c_str());
          return 1;
        }
      }
    }
  }
  return 0;
}
