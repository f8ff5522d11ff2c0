// JSON as Python writes it, made readable by a strict parser (nlohmann::json).
#pragma once

#include <string>

namespace hybrid {

// Python's json writes Infinity / -Infinity / NaN (e.g. Mamba2's time_step_limit); strict JSON
// has no such tokens. Outside strings they become the strings "Infinity", "-Infinity", "NaN"
// (config.cpp's Fields::number() reads them back as the values); everything else is unchanged.
std::string quote_nonfinite(const std::string& text);

}  // namespace hybrid
