// Byte counts for people: "1.5 GiB". (Sizes from YAML are parsed by core/config.hpp's
// parse_byte_size.)
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

/** "512 B", "4.0 KiB", "1.5 GiB" (binary units, one decimal). */
std::string format_bytes(uint64_t bytes);

}  // namespace kiln
