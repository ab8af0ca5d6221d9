// Reader for one `.safetensors` file: an 8-byte little-endian header length, a JSON header naming
// every tensor's dtype, shape and byte range, then the data. The file is memory-mapped and every
// header field is validated, so a truncated or malformed file is an error naming it, never a crash.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/mapped_file.hpp"
#include "model/tensor_info.hpp"

namespace kiln::model {

class SafetensorsFile {
 public:
  /** Maps and validates `path`; throws HostError("[safetensors] <path>: ..."). */
  static SafetensorsFile open(const std::string& path);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::shared_ptr<MappedFile>& mapping() const { return map_; }

 private:
  std::shared_ptr<MappedFile> map_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace kiln::model
