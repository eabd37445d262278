// Must compile with the include roots of the contract layer: its own
// headers and those of util, the layer below it. The control for the
// probes that must fail, so that they fail for the right reason.
#include "contract/placement_codec.h"
#include "reshard/placement.h"
#include "reshard/status.h"
#include "util/json_reader.h"
