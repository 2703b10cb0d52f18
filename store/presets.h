// Built-in model presets: real architectures with their real (Hugging Face) parameter names,
// shapes and init rules, described lazily.
#pragma once
#include <string>
#include <vector>

#include "store/spec.h"

namespace seedstore {

/// Names of the built-in presets.
std::vector<std::string> PresetNames();

/// The preset's lazy spec with root seed `seed` and generator `g`. Error names the preset.
Result<ModelSpec> Preset(const std::string& name, uint64_t seed = 0,
                         Generator g = Generator::kThreefry);

}  // namespace seedstore
