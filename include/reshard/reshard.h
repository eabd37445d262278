// Everything a user of reshard includes, in one header:
//
//   #include "reshard/reshard.h"
//
// The headers it gathers, by what they are for:
//   placement.h, binding.h, stored_manifest.h, legacy.h, dims.h
//                  the contract: placements, runtime bindings, identities
//   plan.h, conversion.h, bound_plan.h, plan_report.h
//                  plans, conversions between dtypes, reports
//   api.h          the entry point: BindBuffers, Reshard (local)
//   live.h         live sessions between processes and hosts
//   weight_store.h, store_uri.h
//                  the weight store: revisions, uploads, loads
//   hf.h, engine.h Hugging Face checkpoints; engine parameter layouts
//   gen.h          the reference layout generator
//   status.h, json.h
//                  Status/Result; JSON helpers
//
// Not gathered here: the SDK for implementers of new backends
// (reshard/sdk/: object and record stores, the URI-scheme registry, the
// Transport interface) and the backends' own headers (reshard/backends/:
// the filesystem and Redis stores, the local transport, UCX settings),
// which a program includes when it uses them by name.

#ifndef RESHARD_RESHARD_H_
#define RESHARD_RESHARD_H_

#include "reshard/api.h"
#include "reshard/binding.h"
#include "reshard/bound_plan.h"
#include "reshard/conversion.h"
#include "reshard/dims.h"
#include "reshard/engine.h"
#include "reshard/fields.h"
#include "reshard/gen.h"
#include "reshard/hf.h"
#include "reshard/json.h"
#include "reshard/legacy.h"
#include "reshard/live.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/plan_report.h"
#include "reshard/status.h"
#include "reshard/store_uri.h"
#include "reshard/stored_manifest.h"
#include "reshard/weight_store.h"

#endif  // RESHARD_RESHARD_H_
