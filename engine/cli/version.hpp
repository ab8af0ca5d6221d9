#pragma once
#include <kiln/kiln_plugin.h>

namespace kiln::cli {
inline constexpr const char* kVersion = KILN_VERSION_STRING;
}
