// A calibration identity's fields in a JSON object, shared by the per-GPU
// cache files (the calibration, GemmEngine's timed choices).
#pragma once
#include <nlohmann/json.hpp>

#include "rlx/runtime/calibration.h"

namespace rlx {

void put_identity(nlohmann::json& j, const CalibrationIdentity& id);
// Throws FormatError naming a missing or mistyped field.
CalibrationIdentity get_identity(const nlohmann::json& j);

}  // namespace rlx
