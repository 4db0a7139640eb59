// The zip container of a torch.save archive (torch_save.cpp): the central directory, read
// once, and the bytes of one entry at a time, read in place. No decompression, no torch.
//
// Accepts a single-disk zip archive, zip64 included (its records and extra fields are read
// wherever a 32-bit field is all ones; torch always writes them). Any entry may be listed, but
// read() gives only the bytes of a stored (method 0), unencrypted entry, checked once against
// its CRC-32 where the archive records one. The record layouts are in zip_archive.cpp.
// Invariants checked: the records lie where their offsets say and inside the file, the
// directory holds exactly the entries and bytes the end record says, every entry's data lies
// before the directory, names are unique, and a local header repeats its central header's name.
// Errors: a DumpError naming the source (torch_save_detail.h's refuse): "damaged zip archive:
// ..." with the advice to copy or save the file again, or what the file or entry is instead
// (too short, not a zip, a compressed or encrypted entry) with how to save it (kSaveRemedy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace parity::dumps {

// One entry of the central directory (sizes and offsets in bytes, zip64 fields applied).
struct ZipEntry {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, size = 0, local = 0;
  uint64_t data = 0;  // offset of the entry's first data byte
};

class ZipArchive {
 public:
  // Reads the central directory of `bytes`, which must outlive the archive: entries are read
  // in place. `source` names the file in errors.
  ZipArchive(const std::string& source, const std::string& bytes);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &entries_[it->second];
  }

  // The entry's bytes: stored, unencrypted, and matching its CRC-32. An archive whose entries
  // all record 0 records none (newer torch can save without CRC-32s, through
  // torch.serialization.set_crc32_options(False)) and is not checked; where any entry records
  // one, every entry is checked, a 0 included (an empty entry's CRC-32 is 0).
  std::string_view read(const ZipEntry& e);

 private:
  static std::string hex(uint32_t v);
  [[noreturn]] void damaged(const std::string& what) const;
  uint64_t at(uint64_t offset, int width) const;

  void read_directory();
  void read_zip64_extra(uint64_t pos, uint64_t len, ZipEntry& e, uint64_t& disk);
  void read_local_header(ZipEntry& e, uint64_t cd_offset);

  std::string source_;
  const unsigned char* p_;
  uint64_t n_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::unordered_set<std::string> crc_checked_;
  bool crc_recorded_ = false;  // some entry records a CRC-32 other than 0
};

}  // namespace parity::dumps
