// A read-only memory map of a whole file. Checkpoint tensors point straight into it, so weights are
// never copied on the host; the map lives as long as any Checkpoint holding it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace kiln::model {

class MappedFile {
 public:
  /** Maps `path`; throws HostError ("[<what>] cannot open ...") naming the file and the OS reason. */
  static std::shared_ptr<MappedFile> open(const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace kiln::model
