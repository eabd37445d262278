// The live path (live.h): a rank's seat in a standing session between
// processes over a peer exchange, its rendezvous, and AbortLiveSession.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "reshard/live.h"
#include "src/python/buffers.h"
#include "src/python/convert.h"
#include "src/python/errors.h"
#include "src/python/module.h"
#include "src/python/report_dict.h"

namespace reshard::python {
namespace {

namespace py = pybind11;

// ", not <seconds>" (%g: nan, inf, -1) for a refused duration.
std::string NotSeconds(double seconds) {
  char shown[64];
  std::snprintf(shown, sizeof shown, ", not %g", seconds);
  return shown;
}

LiveProtocol ProtocolOf(const std::string& name) {
  if (name == "auto") return LiveProtocol::kAuto;
  if (name == "push") return LiveProtocol::kPush;
  if (name == "pull") return LiveProtocol::kPull;
  ThrowInvalid("protocol", "must be auto, push or pull, got '" + name + "'");
}

// A rendezvous record store (put-once records), shared by Python copies.
class PyRendezvous {
 public:
  explicit PyRendezvous(std::unique_ptr<RecordStore> store)
      : store_(std::move(store)) {}
  RecordStore& get() const { return *store_; }

 private:
  std::shared_ptr<RecordStore> store_;
};

void RegisterRendezvous(py::module_& m) {
  py::class_<PyRendezvous>(
      m, "Rendezvous",
      "Put-once records under '/'-separated keys shared by the processes of "
      "a session (OpenRendezvous: a directory or fs://DIR).")
      .def(py::init([](py::object uri) {
             return PyRendezvous(
                 Unwrap(OpenRendezvous(ToStr(uri, "rendezvous"))));
           }),
           py::arg("uri"))
      .def(
          "put",
          [](const PyRendezvous& r, py::object key, py::bytes value) {
            const std::string k = ToStr(key, "record key");
            const std::string v = value;
            py::gil_scoped_release release;
            ThrowIfError(r.get().Put(k, v));
          },
          py::arg("key"), py::arg("value"),
          "Publishes `value`; AlreadyExistsError if the key exists.")
      .def(
          "get",
          [](const PyRendezvous& r, py::object key) {
            const std::string k = ToStr(key, "record key");
            std::string v;
            {
              py::gil_scoped_release release;
              v = Unwrap(r.get().Get(k));
            }
            return py::bytes(v);
          },
          py::arg("key"), "The record's bytes; NotFoundError if absent.")
      .def(
          "list",
          [](const PyRendezvous& r, py::object prefix) {
            const std::string p = ToStr(prefix, "record prefix");
            py::gil_scoped_release release;
            return Unwrap(r.get().List(p));
          },
          py::arg("prefix") = "", "Every key starting with `prefix`, sorted.")
      .def(
          "delete",
          [](const PyRendezvous& r, py::object key) {
            const std::string k = ToStr(key, "record key");
            py::gil_scoped_release release;
            ThrowIfError(r.get().Delete(k));
          },
          py::arg("key"));
}

py::dict UpdateDict(const LiveUpdateReport& r) { return DictOf(r); }

const char* OutcomeName(LiveOutcome o) {
  switch (o) {
    case LiveOutcome::kOk:
      return "ok";
    case LiveOutcome::kFailed:
      return "failed";
    case LiveOutcome::kUncertain:
      break;
  }
  return "uncertain";
}

// A version as a dict: generation, source_placement_id, tag, digest (an
// int; 0 when the session does not verify). Needs the GIL.
py::dict VersionDict(const LiveVersion& v) {
  py::dict d;
  d["generation"] = v.generation;
  d["source_placement_id"] = v.source_placement_id;
  d["tag"] = v.tag;
  d["digest"] = v.digest;
  return d;
}

// What the session's callbacks share with the Python object: the caller's
// bindings as of now and a refusal to fail the next update with (the
// fence, LiveSessionOptions::current_bindings), and the on_version
// callable with the first exception it raised. Called on the thread that
// runs Update, with the GIL released; destroyed with the GIL held (the
// Python object keeps a reference, and copies of the options hold only
// this pointer).
struct SessionHooks {
  std::mutex mu;
  LiveBindings current;           // plain bindings, as the caller gave them
  std::optional<Status> refusal;  // fails the next fence
  py::object on_version;          // None, or callable(dict)
  std::exception_ptr error;       // on_version's first exception

  Result<LiveBindings> Fence() {
    std::lock_guard<std::mutex> lock(mu);
    if (refusal) return std::exchange(refusal, std::nullopt).value();
    return current;
  }

  void Version(const LiveVersion& v) {
    py::gil_scoped_acquire gil;
    if (error) return;
    try {
      on_version(VersionDict(v));
    } catch (...) {  // never through the library's frames
      error = std::current_exception();
    }
  }

  // With the GIL held: raises on_version's first exception, if any.
  void Rethrow() {
    if (error) std::rethrow_exception(std::exchange(error, nullptr));
  }
};

// A standing session and the rendezvous it lives in (declared after the
// store, so that the session is destroyed first).
class PyStandingSession {
 public:
  std::unique_ptr<RecordStore> store;
  std::unique_ptr<LiveSession> session;
  WeightPlacementManifest source, target;
  BufferBindingOptions binding_options;
  std::shared_ptr<SessionHooks> hooks;
};

// None, or a mapping of setting names to values (str() of each value),
// in the mapping's order.
PeerExchangeOptions ExchangeOptionsOf(py::object settings) {
  PeerExchangeOptions out;
  if (settings.is_none()) return out;
  if (!py::isinstance<py::dict>(settings)) {
    ThrowInvalid(
        "exchange_options",
        "must be a dict of setting names to values, not " +
            std::string(py::str(settings.get_type().attr("__name__"))));
  }
  for (auto [name, value] : settings.cast<py::dict>()) {
    out.Set(ToStr(py::reinterpret_borrow<py::object>(name), "exchange_options"),
            std::string(py::str(value)));
  }
  return out;
}

// "pipeline" or "mirror" (LiveSessionOptions::device_staging).
DeviceStaging DeviceStagingOf(py::object value) {
  const std::string name = ToStr(value, "device_staging");
  if (name == "pipeline") return DeviceStaging::kPipeline;
  if (name == "mirror") return DeviceStaging::kMirror;
  ThrowInvalid("device_staging",
               "must be \"pipeline\" or \"mirror\", got \"" + name + "\"");
}

LiveSessionOptions SessionOptionsOf(py::object session, py::object rank,
                                    py::object ranks, double timeout_seconds,
                                    py::object max_in_flight,
                                    py::object protocol, py::object exchange,
                                    py::object exchange_options) {
  LiveSessionOptions o;
  o.session = ToStr(session, "session");
  o.rank = static_cast<uint32_t>(ToU64(rank, "rank"));
  o.ranks = static_cast<uint32_t>(ToU64(ranks, "ranks"));
  // NaN fails both comparisons; a week bounds the conversion below.
  if (!(timeout_seconds > 0) || !(timeout_seconds <= 7 * 86400.0)) {
    ThrowInvalid("timeout", "must be > 0 and at most 604800 seconds" +
                                NotSeconds(timeout_seconds));
  }
  o.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000.0));
  o.max_in_flight =
      static_cast<uint32_t>(ToU64(max_in_flight, "max_in_flight"));
  o.protocol = ProtocolOf(ToStr(protocol, "protocol"));
  o.exchange = ToStr(exchange, "exchange");
  o.exchange_options = ExchangeOptionsOf(exchange_options);
  return o;
}

// verify, rejoin, rejoin_timeout, the fault hook and on_version; the
// fence and the callback go through the session's hooks.
void SetRecoveryOptions(PyStandingSession& s, bool verify,
                        double rejoin_timeout_seconds, bool rejoin,
                        py::object on_version, py::object corrupt_in_update,
                        LiveSessionOptions& o) {
  o.verify = verify;
  if (!(rejoin_timeout_seconds >= 0) ||
      !(rejoin_timeout_seconds <= 7 * 86400.0)) {
    ThrowInvalid("rejoin_timeout", "must be between 0 and 604800 seconds" +
                                       NotSeconds(rejoin_timeout_seconds));
  }
  o.rejoin_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(rejoin_timeout_seconds * 1e3));
  o.rejoin = rejoin;
  o.corrupt_received_in_update =
      ToU64(corrupt_in_update, "corrupt_received_in_update");
  std::shared_ptr<SessionHooks> hooks = s.hooks;
  o.current_bindings = [hooks] { return hooks->Fence(); };
  if (!on_version.is_none()) {
    if (!PyCallable_Check(on_version.ptr())) {
      ThrowInvalid("on_version", "must be a callable (version) or None");
    }
    hooks->on_version = std::move(on_version);
    o.on_version = [hooks](const LiveVersion& v) { hooks->Version(v); };
  }
}

std::unique_ptr<PyStandingSession> OpenStanding(
    py::object rendezvous, const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, py::dict sources, py::dict targets,
    py::object session, py::object rank, py::object ranks,
    double timeout_seconds, py::object max_in_flight, py::object protocol,
    py::object options, py::object exchange, py::object exchange_options,
    bool shadow_targets, bool movable_sources, double heartbeat_seconds,
    double peer_timeout_seconds, bool convert, py::object fp8_block, bool delta,
    py::object target_declaration, py::object expected_target_maps, bool verify,
    double rejoin_timeout_seconds, bool rejoin, py::object on_version,
    py::object corrupt_received_in_update, py::object device_staging,
    py::object device_staging_bytes) {
  auto s = std::make_unique<PyStandingSession>(PyStandingSession{
      nullptr, nullptr, source, target, {}, std::make_shared<SessionHooks>()});
  LiveSessionOptions o =
      SessionOptionsOf(session, rank, ranks, timeout_seconds, max_in_flight,
                       protocol, exchange, exchange_options);
  SetRecoveryOptions(*s, verify, rejoin_timeout_seconds, rejoin,
                     std::move(on_version), corrupt_received_in_update, o);
  o.shadow_targets = shadow_targets;
  o.movable_sources = movable_sources;
  o.device_staging = DeviceStagingOf(device_staging);
  o.device_staging_bytes = ToU64(device_staging_bytes, "device_staging_bytes");
  o.convert = convert;
  o.fp8_block = ToFp8Block(fp8_block, "LiveSession.fp8_block");
  o.delta = delta;
  o.target_declaration = ToStr(target_declaration, "target_declaration");
  if (!expected_target_maps.is_none()) {
    // (placement, parameter maps JSON) of the engine layout the targets
    // must declare.
    auto pair = expected_target_maps.cast<py::tuple>();
    if (pair.size() != 2) {
      ThrowInvalid("expected_target_maps", "must be (placement, maps JSON)");
    }
    o.check_target_declaration =
        Unwrap(TargetMapsCheck(pair[0].cast<const WeightPlacementManifest&>(),
                               ToStr(pair[1], "expected_target_maps")));
  }
  const auto check = [](double v, std::string_view field) {
    if (!(v >= 0) || !(v <= 3600.0)) {
      ThrowInvalid(field, "must be between 0 and 3600 seconds" + NotSeconds(v));
    }
  };
  check(heartbeat_seconds, "heartbeat_interval");
  check(peer_timeout_seconds, "peer_timeout");
  o.heartbeat_interval =
      std::chrono::milliseconds(static_cast<int64_t>(heartbeat_seconds * 1e3));
  o.peer_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(peer_timeout_seconds * 1e3));
  s->binding_options = BindingOptionsOf(options);
  // Checked here, before anything is published, and not again by Open.
  LiveBindings bindings = LiveBindings::Of(
      BindCheckedParticipants(source, sources, s->binding_options, "source",
                              "source bindings"),
      BindCheckedParticipants(target, targets, s->binding_options, "target",
                              "target bindings"));
  s->hooks->current = {bindings.sources, bindings.targets, std::nullopt,
                       std::nullopt};
  const std::string uri = ToStr(rendezvous, "rendezvous");
  py::gil_scoped_release release;
  s->store = Unwrap(OpenRendezvous(uri));
  s->session = Unwrap(LiveSession::Open(*s->store, source, target,
                                        std::move(bindings), std::move(o)));
  return s;
}

// Update at `g` with `tag`, the GIL released; raises UncertainError when
// it left operations in flight, on_version's exception after a success.
py::dict RunUpdate(PyStandingSession& s, uint64_t g, const LiveBindings* now,
                   const std::string& tag) {
  Result<LiveUpdateReport> r = Status::Internal("not run");
  {
    py::gil_scoped_release release;
    r = s.session->Update(g, now, tag);
  }
  if (!r.ok() && s.session->outcome() == LiveOutcome::kUncertain) {
    throw UncertainError(r.status());
  }
  py::dict out = UpdateDict(Unwrap(std::move(r)));
  s.hooks->Rethrow();
  return out;
}

py::dict UpdateStanding(PyStandingSession& s, py::object generation,
                        py::object sources, py::object targets,
                        py::object tag) {
  const uint64_t g = ToU64(generation, "generation");
  const std::string t = ToStr(tag, "tag");
  std::optional<LiveBindings> now;
  if (!sources.is_none() || !targets.is_none()) {
    if (sources.is_none() || targets.is_none()) {
      ThrowInvalid("update", "takes both sources and targets, or neither");
    }
    // Update checks the bindings that moved, and only those.
    now.emplace();
    now->sources =
        DescribeParticipants(s.source, sources, s.binding_options, "source");
    now->targets =
        DescribeParticipants(s.target, targets, s.binding_options, "target");
    // The fence of this update and the next ones.
    std::lock_guard<std::mutex> lock(s.hooks->mu);
    s.hooks->current = *now;
  }
  return RunUpdate(s, g, now ? &*now : nullptr, t);
}

// The update at `generation` fails at this rank's fence with `reason`
// before any byte moves, on every rank alike (the session stays usable).
void RefuseStanding(PyStandingSession& s, py::object generation,
                    py::object reason) {
  const uint64_t g = ToU64(generation, "generation");
  const std::string why = ToStr(reason, "reason");
  {
    std::lock_guard<std::mutex> lock(s.hooks->mu);
    s.hooks->refusal = Status::FailedPrecondition(why);
  }
  // A refusal the fence never took (the update stopped before it) must not
  // fail a later update.
  const auto drop = [&s] {
    std::lock_guard<std::mutex> lock(s.hooks->mu);
    s.hooks->refusal.reset();
  };
  try {
    RunUpdate(s, g, nullptr, "");
  } catch (...) {
    drop();
    throw;
  }
  drop();
  ThrowIfError(Status::Internal("live session: refused update " +
                                std::to_string(g) + " succeeded"));
}

// StandingSession's read-only properties.
void AddStandingProperties(py::class_<PyStandingSession>& c) {
  c.def_property_readonly(
       "outcome",
       [](const PyStandingSession& s) {
         return std::string(OutcomeName(s.session->outcome()));
       })
      .def_property_readonly(
          "open_seconds",
          [](const PyStandingSession& s) { return s.session->open_seconds(); })
      .def_property_readonly(
          "regions",
          [](const PyStandingSession& s) { return s.session->regions(); })
      .def_property_readonly(
          "usable",
          [](const PyStandingSession& s) { return s.session->usable(); })
      .def_property_readonly("version",
                             [](const PyStandingSession& s) -> py::object {
                               const std::optional<LiveVersion> v =
                                   s.session->version();
                               if (!v) return py::none();
                               return VersionDict(*v);
                             })
      .def_property_readonly(
          "connections",
          [](const PyStandingSession& s) { return s.session->connections(); })
      .def_property_readonly(
          "rejoins",
          [](const PyStandingSession& s) { return s.session->rejoins(); })
      .def_property_readonly("delta_snapshot_bytes",
                             [](const PyStandingSession& s) {
                               return s.session->delta_snapshot_bytes();
                             });
}

void RegisterStanding(py::module_& m) {
  py::class_<PyStandingSession> c(
      m, "StandingSession",
      "A standing live session (LiveSession): open once, update many "
      "times, close.");
  c.def(py::init(&OpenStanding), py::arg("rendezvous"), py::arg("source"),
        py::arg("target"), py::arg("sources"), py::arg("targets"),
        py::kw_only(), py::arg("session"), py::arg("rank"), py::arg("ranks"),
        py::arg("timeout") = 60.0, py::arg("max_in_flight") = 64,
        py::arg("protocol") = "auto", py::arg("options") = py::none(),
        py::arg("exchange") = "ucx", py::arg("exchange_options") = py::none(),
        py::arg("shadow_targets") = false, py::arg("movable_sources") = false,
        py::arg("heartbeat_interval") = 0.2, py::arg("peer_timeout") = 1.5,
        py::arg("convert") = false, py::arg("fp8_block") = py::none(),
        py::arg("delta") = false, py::arg("target_declaration") = "",
        py::arg("expected_target_maps") = py::none(), py::arg("verify") = true,
        py::arg("rejoin_timeout") = 30.0, py::arg("rejoin") = false,
        py::arg("on_version") = py::none(),
        py::arg("corrupt_received_in_update") = 0,
        py::arg("device_staging") = "pipeline",
        py::arg("device_staging_bytes") =
            LiveSessionOptions{}.device_staging_bytes)
      .def("update", &UpdateStanding, py::arg("generation"),
           py::arg("sources") = py::none(), py::arg("targets") = py::none(),
           py::arg("tag") = "",
           "One update; sources and targets ({participant: {fragment: "
           "address}}) when this rank's buffers moved; `tag` goes into the "
           "version it publishes.")
      .def("refuse", &RefuseStanding, py::arg("generation"), py::arg("reason"),
           "Fails the update at `generation` on every rank at this rank's "
           "fence, naming `reason`, before any byte moves; raises the "
           "update's error (the session stays usable).")
      .def(
          "abort",
          [](PyStandingSession& s, py::object reason) {
            const std::string why = ToStr(reason, "reason");
            py::gil_scoped_release release;
            ThrowIfError(s.session->Abort(Status::Aborted(why)));
          },
          py::arg("reason"),
          "Gives up the session; the other ranks fail naming this rank.")
      .def(
          "close",
          [](PyStandingSession& s) {
            py::gil_scoped_release release;
            ThrowIfError(s.session->Close());
          },
          "Closes (a barrier with every rank) and removes this rank's "
          "records.");
  AddStandingProperties(c);
}

}  // namespace

void RegisterLive(py::module_& m) {
  RegisterStanding(m);
  RegisterRendezvous(m);
  m.def("registered_exchanges", &RegisteredPeerExchanges,
        "The registered peer exchanges by name, sorted (what "
        "LiveSession(exchange=...) takes).");
  m.def(
      "abort_live",
      [](py::object rendezvous, py::object session, py::object rank,
         py::object reason) {
        const std::string uri = ToStr(rendezvous, "rendezvous");
        const std::string s = ToStr(session, "session");
        const uint32_t r = static_cast<uint32_t>(ToU64(rank, "rank"));
        const std::string why = ToStr(reason, "reason");
        py::gil_scoped_release release;
        auto store = Unwrap(OpenRendezvous(uri));
        ThrowIfError(AbortLiveSession(*store, s, r, Status::Aborted(why)));
      },
      py::arg("rendezvous"), py::arg("session"), py::arg("rank"),
      py::arg("reason"),
      "Records that `rank` gives up on `session` (AbortLiveSession): its "
      "peers stop naming it instead of waiting for the timeout.");
}

}  // namespace reshard::python
