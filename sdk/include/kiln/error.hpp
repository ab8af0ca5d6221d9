/**
 * @file error.hpp
 * @brief kiln::Error, what plugin code throws; the SDK's adapters turn it into a kiln_error at the
 *        ABI boundary.
 */
#pragma once

#include <kiln/kiln_plugin.h>

#include <stdexcept>
#include <string>

namespace kiln {

/** Thrown inside plugins to report a failure with a specific status. */
class Error : public std::runtime_error {
 public:
  Error(kiln_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  kiln_status status() const noexcept { return status_; }

 private:
  kiln_status status_;
};

}  // namespace kiln
