// The "ucx" exchange's settings by name (reshard/backends/ucx_options.h).

#include "reshard/backends/ucx_options.h"

#include <cctype>
#include <string>

namespace reshard {
namespace {

const char* ErrorHandlingName(UcxErrorHandling e) {
  switch (e) {
    case UcxErrorHandling::kPeer:
      return "peer";
    case UcxErrorHandling::kNone:
      return "none";
    case UcxErrorHandling::kAuto:
      break;
  }
  return "auto";
}

const char* MemorySettingName(UcxMemorySetting m) {
  switch (m) {
    case UcxMemorySetting::kHost:
      return "host";
    case UcxMemorySetting::kCuda:
      return "cuda";
    case UcxMemorySetting::kAuto:
      break;
  }
  return "auto";
}

// A UCX setting's own name: capitals, digits and '_', starting with a
// capital.
bool IsUcxSettingName(const std::string& name) {
  if (name.empty() || !std::isupper(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  for (char c : name) {
    if (!std::isupper(static_cast<unsigned char>(c)) &&
        !std::isdigit(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

Status Malformed(const std::string& name, const std::string& value,
                 const char* expected) {
  return Status::InvalidArgument("peer exchange \"ucx\": setting " + name +
                                 "=\"" + value + "\" is not " + expected);
}

// Applies one setting to `o`.
Status Apply(const std::string& name, const std::string& value, UcxOptions& o) {
  if (name == "tls") {
    o.tls = value;
  } else if (name == "net_devices") {
    o.net_devices = value;
  } else if (name == "shm_segment_bytes") {
    const bool digits =
        !value.empty() && value.size() <= 9 &&
        value.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) return Malformed(name, value, "a decimal byte count");
    o.shm_segment_bytes = static_cast<uint32_t>(std::stoul(value));
  } else if (name == "error_handling") {
    if (value == "auto") {
      o.error_handling = UcxErrorHandling::kAuto;
    } else if (value == "peer") {
      o.error_handling = UcxErrorHandling::kPeer;
    } else if (value == "none") {
      o.error_handling = UcxErrorHandling::kNone;
    } else {
      return Malformed(name, value, "auto, peer or none");
    }
  } else if (name == "memory") {
    if (value == "auto") {
      o.memory = UcxMemorySetting::kAuto;
    } else if (value == "host") {
      o.memory = UcxMemorySetting::kHost;
    } else if (value == "cuda") {
      o.memory = UcxMemorySetting::kCuda;
    } else {
      return Malformed(name, value, "auto, host or cuda");
    }
  } else if (IsUcxSettingName(name)) {
    o.config.emplace_back(name, value);
  } else {
    return Status::InvalidArgument(
        "peer exchange \"ucx\" has no setting \"" + name +
        "\" (it takes tls, net_devices, shm_segment_bytes, error_handling, "
        "memory and UCX settings by their names in capitals)");
  }
  return Status::OK();
}

}  // namespace

PeerExchangeOptions ToPeerExchangeOptions(const UcxOptions& options) {
  const UcxOptions defaults;
  PeerExchangeOptions out;
  if (options.tls != defaults.tls) out.Set("tls", options.tls);
  if (options.net_devices != defaults.net_devices) {
    out.Set("net_devices", options.net_devices);
  }
  if (options.shm_segment_bytes != defaults.shm_segment_bytes) {
    out.Set("shm_segment_bytes", std::to_string(options.shm_segment_bytes));
  }
  if (options.error_handling != defaults.error_handling) {
    out.Set("error_handling", ErrorHandlingName(options.error_handling));
  }
  if (options.memory != defaults.memory) {
    out.Set("memory", MemorySettingName(options.memory));
  }
  for (const auto& [name, value] : options.config) out.Set(name, value);
  return out;
}

Result<UcxOptions> UcxOptionsFromSettings(const PeerExchangeOptions& options) {
  UcxOptions o;
  for (const auto& [name, value] : options.settings) {
    RESHARD_RETURN_NOT_OK(Apply(name, value, o));
  }
  return o;
}

}  // namespace reshard
