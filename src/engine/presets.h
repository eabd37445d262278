// The engine presets behind MakeEngineLayout.

#ifndef RESHARD_ENGINE_PRESETS_H_
#define RESHARD_ENGINE_PRESETS_H_

#include "engine/layout_builder.h"

namespace reshard::internal {

Result<EngineLayout> VllmLayout(const HfConfig& config,
                                const CanonTensors& canon,
                                const EngineLayoutOptions& options);
Result<EngineLayout> MegatronLayout(const HfConfig& config,
                                    const CanonTensors& canon,
                                    const EngineLayoutOptions& options);

}  // namespace reshard::internal

#endif  // RESHARD_ENGINE_PRESETS_H_
