// The live path (live.h): a rank's seat in a standing session between
// processes over a peer exchange, its rendezvous, and AbortLiveSession.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

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

// A standing session and the rendezvous it lives in (declared after the
// store, so that the session is destroyed first).
class PyStandingSession {
 public:
  std::unique_ptr<RecordStore> store;
  std::unique_ptr<LiveSession> session;
  WeightPlacementManifest source, target;
  BufferBindingOptions binding_options;
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

std::unique_ptr<PyStandingSession> OpenStanding(
    py::object rendezvous, const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, py::dict sources, py::dict targets,
    py::object session, py::object rank, py::object ranks,
    double timeout_seconds, py::object max_in_flight, py::object protocol,
    py::object options, py::object exchange, py::object exchange_options,
    bool shadow_targets, bool movable_sources, double heartbeat_seconds,
    double peer_timeout_seconds, bool convert, py::object fp8_block, bool delta,
    py::object target_declaration, py::object expected_target_maps) {
  auto s = std::make_unique<PyStandingSession>(
      PyStandingSession{nullptr, nullptr, source, target, {}});
  LiveSessionOptions o =
      SessionOptionsOf(session, rank, ranks, timeout_seconds, max_in_flight,
                       protocol, exchange, exchange_options);
  o.shadow_targets = shadow_targets;
  o.movable_sources = movable_sources;
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
  const std::string uri = ToStr(rendezvous, "rendezvous");
  py::gil_scoped_release release;
  s->store = Unwrap(OpenRendezvous(uri));
  s->session = Unwrap(LiveSession::Open(*s->store, source, target,
                                        std::move(bindings), std::move(o)));
  return s;
}

py::dict UpdateStanding(PyStandingSession& s, py::object generation,
                        py::object sources, py::object targets) {
  const uint64_t g = ToU64(generation, "generation");
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
  }
  Result<LiveUpdateReport> r = Status::Internal("not run");
  {
    py::gil_scoped_release release;
    r = s.session->Update(g, now ? &*now : nullptr);
  }
  if (!r.ok() && s.session->outcome() == LiveOutcome::kUncertain) {
    throw UncertainError(r.status());
  }
  return UpdateDict(Unwrap(std::move(r)));
}

void RegisterStanding(py::module_& m) {
  py::class_<PyStandingSession>(
      m, "StandingSession",
      "A standing live session (LiveSession): open once, update many "
      "times, close.")
      .def(
          py::init(&OpenStanding), py::arg("rendezvous"), py::arg("source"),
          py::arg("target"), py::arg("sources"), py::arg("targets"),
          py::kw_only(), py::arg("session"), py::arg("rank"), py::arg("ranks"),
          py::arg("timeout") = 60.0, py::arg("max_in_flight") = 64,
          py::arg("protocol") = "auto", py::arg("options") = py::none(),
          py::arg("exchange") = "ucx", py::arg("exchange_options") = py::none(),
          py::arg("shadow_targets") = false, py::arg("movable_sources") = false,
          py::arg("heartbeat_interval") = 0.2, py::arg("peer_timeout") = 1.5,
          py::arg("convert") = false, py::arg("fp8_block") = py::none(),
          py::arg("delta") = false, py::arg("target_declaration") = "",
          py::arg("expected_target_maps") = py::none())
      .def("update", &UpdateStanding, py::arg("generation"),
           py::arg("sources") = py::none(), py::arg("targets") = py::none(),
           "One update; sources and targets ({participant: {fragment: "
           "address}}) when this rank's buffers moved.")
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
          "records.")
      .def_property_readonly(
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
      .def_property_readonly("delta_snapshot_bytes",
                             [](const PyStandingSession& s) {
                               return s.session->delta_snapshot_bytes();
                             });
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
