// Reading the zip container of a torch.save archive (zip_archive.h).
#include "dumps/zip_archive.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <utility>

#include "dumps/torch_save_detail.h"

namespace parity::dumps {
namespace {

// [offset, offset + length) lies inside [0, size), without overflow.
bool fits(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

// CRC-32 as zip stores it (reflected polynomial 0xEDB88320, initial and final value ~0),
// eight bytes a step: table[k][b] is the CRC of byte b followed by k zero bytes.
uint32_t crc32(const unsigned char* p, uint64_t n) {
  static const auto table = [] {
    std::vector<std::array<uint32_t, 256>> t(8);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (size_t k = 1; k < 8; ++k)
      for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (; n >= 8; p += 8, n -= 8) {
    const uint32_t lo = c ^ static_cast<uint32_t>(le(p, 4));
    const uint32_t hi = static_cast<uint32_t>(le(p + 4, 4));
    c = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^
        table[4][lo >> 24] ^ table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF] ^
        table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) c = table[0][(c ^ *p) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// ---------------------------------------------------------------------------------------------
// The zip container. Records read, all little-endian (PKWARE APPNOTE 6.3), offsets in bytes:
//   end of central directory (EOCD), 22 bytes + comment, within the file's last 64 KiB + 22:
//     0 sig 0x06054b50 | 4 disk | 6 disk of the directory | 8 entries on this disk
//     | 10 entries | 12 directory size | 16 directory offset | 20 comment length
//   zip64 EOCD locator, 20 bytes, right before the EOCD:
//     0 sig 0x07064b50 | 4 disk of the record | 8 record offset (8) | 16 disks
//   zip64 EOCD record, 56 bytes + extensible data, before the locator:
//     0 sig 0x06064b50 | 4 size of the rest (8) | 16 disk | 20 disk of the directory
//     | 24 entries on this disk (8) | 32 entries (8) | 40 directory size (8) | 48 offset (8)
//   central directory header, 46 bytes + name + extra + comment, one per entry:
//     0 sig 0x02014b50 | 8 flags | 10 method | 16 CRC-32 | 20 compressed size | 24 size
//     | 28 name length | 30 extra length | 32 comment length | 34 disk | 42 local header offset
//   local file header, 30 bytes + name + extra, then the entry's data:
//     0 sig 0x04034b50 | 6 flags | 8 method | 26 name length | 28 extra length
//   zip64 extra field (id 0x0001) in a central header: the 8-byte size, compressed size and
//     local header offset and the 4-byte disk, each present only where the header's 32-bit
//     field is all ones, in that order.

constexpr uint32_t kEocdSig = 0x06054b50, kLocatorSig = 0x07064b50, kZip64EocdSig = 0x06064b50;
constexpr uint32_t kCentralSig = 0x02014b50, kLocalSig = 0x04034b50;

}  // namespace

ZipArchive::ZipArchive(const std::string& source, const std::string& bytes)
    : source_(source), p_(reinterpret_cast<const unsigned char*>(bytes.data())),
      n_(bytes.size()) {
  read_directory();
}

std::string_view ZipArchive::read(const ZipEntry& e) {
  if (e.flags & 1)
    refuse(source_, "zip entry '" + shown(e.name) + "' is encrypted; " + kSaveRemedy);
  if (e.method != 0)
    refuse(source_, "zip entry '" + shown(e.name) + "' is compressed (zip method " +
                        std::to_string(e.method) + "), and torch.save writes stored entries "
                        "only: the archive was rewritten by another tool; " + kSaveRemedy);
  if (e.compressed != e.size)
    refuse(source_, "stored zip entry '" + shown(e.name) + "' has compressed size " +
                        std::to_string(e.compressed) + " and size " + std::to_string(e.size));
  const auto* data = p_ + e.data;
  if (crc_recorded_ && !crc_checked_.count(e.name)) {
    const uint32_t got = crc32(data, e.size);
    if (got != e.crc)
      refuse(source_, "zip entry '" + shown(e.name) + "' fails its CRC-32 check (recorded " +
                          hex(e.crc) + ", computed " + hex(got) +
                          "): the file is damaged; copy or save it again");
    crc_checked_.insert(e.name);
  }
  return {reinterpret_cast<const char*>(data), static_cast<size_t>(e.size)};
}

std::string ZipArchive::hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

[[noreturn]] void ZipArchive::damaged(const std::string& what) const {
  refuse(source_, "damaged zip archive: " + what + "; copy or save the file again");
}

uint64_t ZipArchive::at(uint64_t offset, int width) const { return le(p_ + offset, width); }

void ZipArchive::read_directory() {
  if (n_ < 22) refuse(source_, "too short (" + std::to_string(n_) +
                                   " bytes) to be a torch.save zip archive; " + kSaveRemedy);
  // The EOCD: the last signature, searching back over at most a 64 KiB comment.
  const uint64_t lowest = n_ - 22 > 0xFFFF ? n_ - 22 - 0xFFFF : 0;
  uint64_t eocd = n_;
  for (uint64_t pos = n_ - 22 + 1; pos-- > lowest;) {
    if (at(pos, 4) == kEocdSig && 22 + at(pos + 20, 2) <= n_ - pos) {
      eocd = pos;
      break;
    }
  }
  if (eocd == n_) {
    if (n_ >= 4 && at(0, 4) == kLocalSig)
      damaged("no end-of-central-directory record (the file is truncated?)");
    refuse(source_, std::string("not a torch.save zip archive (no zip signature); ") +
                        kSaveRemedy);
  }
  uint64_t disk = at(eocd + 4, 2), cd_disk = at(eocd + 6, 2);
  uint64_t count_here = at(eocd + 8, 2), count = at(eocd + 10, 2);
  uint64_t cd_size = at(eocd + 12, 4), cd_offset = at(eocd + 16, 4);
  uint64_t cd_limit = eocd;  // the directory ends before this offset
  if (eocd >= 20 && at(eocd - 20, 4) == kLocatorSig) {
    const uint64_t record = at(eocd - 20 + 8, 8);
    if (at(eocd - 20 + 4, 4) != 0 || at(eocd - 20 + 16, 4) > 1)
      damaged("the zip64 locator names another disk (multi-part archives are not read)");
    if (!fits(record, 56, eocd - 20) || at(record, 4) != kZip64EocdSig)
      damaged("the zip64 locator points to no zip64 end-of-central-directory record");
    const uint64_t rest = at(record + 4, 8);
    if (rest < 44 || !fits(record + 12, rest, eocd - 20))
      damaged("the zip64 end-of-central-directory record has size " + std::to_string(rest));
    const uint64_t disk64 = at(record + 16, 4), cd_disk64 = at(record + 20, 4);
    const uint64_t here64 = at(record + 24, 8), count64 = at(record + 32, 8);
    const uint64_t size64 = at(record + 40, 8), offset64 = at(record + 48, 8);
    // The 32-bit fields hold the same values, or all ones where they do not fit.
    const auto agrees = [](uint64_t v32, uint64_t all_ones, uint64_t v64) {
      return v32 == all_ones || v32 == v64;
    };
    if (!agrees(disk, 0xFFFF, disk64) || !agrees(cd_disk, 0xFFFF, cd_disk64) ||
        !agrees(count_here, 0xFFFF, here64) || !agrees(count, 0xFFFF, count64) ||
        !agrees(cd_size, 0xFFFFFFFF, size64) || !agrees(cd_offset, 0xFFFFFFFF, offset64))
      damaged("the end-of-central-directory record and its zip64 record disagree");
    disk = disk64, cd_disk = cd_disk64, count_here = here64, count = count64;
    cd_size = size64, cd_offset = offset64, cd_limit = record;
  } else if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    damaged("the end-of-central-directory record needs a zip64 record, and there is none");
  }
  if (disk != 0 || cd_disk != 0 || count_here != count)
    damaged("the archive spans several disks (multi-part archives are not read)");
  if (!fits(cd_offset, cd_size, cd_limit))
    damaged("the central directory (" + std::to_string(cd_size) + " bytes at offset " +
            std::to_string(cd_offset) + ") lies outside the file");
  if (count > cd_size / 46)
    damaged(std::to_string(count) + " entries cannot fit a central directory of " +
            std::to_string(cd_size) + " bytes");

  entries_.reserve(static_cast<size_t>(count));
  uint64_t pos = cd_offset;
  const uint64_t cd_end = cd_offset + cd_size;
  for (uint64_t i = 0; i < count; ++i) {
    if (!fits(pos, 46, cd_end) || at(pos, 4) != kCentralSig)
      damaged("central directory entry " + std::to_string(i) + " is missing");
    ZipEntry e;
    e.flags = static_cast<uint16_t>(at(pos + 8, 2));
    e.method = static_cast<uint16_t>(at(pos + 10, 2));
    e.crc = static_cast<uint32_t>(at(pos + 16, 4));
    e.compressed = at(pos + 20, 4);
    e.size = at(pos + 24, 4);
    const uint64_t name_len = at(pos + 28, 2), extra_len = at(pos + 30, 2);
    const uint64_t comment_len = at(pos + 32, 2);
    uint64_t entry_disk = at(pos + 34, 2);
    e.local = at(pos + 42, 4);
    const uint64_t total = 46 + name_len + extra_len + comment_len;
    if (!fits(pos, total, cd_end))
      damaged("central directory entry " + std::to_string(i) + " runs past the directory");
    e.name.assign(reinterpret_cast<const char*>(p_ + pos + 46), name_len);
    read_zip64_extra(pos + 46 + name_len, extra_len, e, entry_disk);
    if (entry_disk != 0) damaged("entry '" + shown(e.name) + "' is on another disk");
    read_local_header(e, cd_offset);
    if (!index_.emplace(e.name, entries_.size()).second)
      damaged("two entries are named '" + shown(e.name) + "'");
    crc_recorded_ = crc_recorded_ || e.crc != 0;
    entries_.push_back(std::move(e));
    pos += total;
  }
  if (pos != cd_end)
    damaged("the central directory holds " + std::to_string(pos - cd_offset) +
            " bytes of entries, the end record says " + std::to_string(cd_size));
}

// The zip64 extra field, where a 32-bit field of the central header is all ones.
void ZipArchive::read_zip64_extra(uint64_t pos, uint64_t len, ZipEntry& e, uint64_t& disk) {
  const bool need_size = e.size == 0xFFFFFFFF, need_compressed = e.compressed == 0xFFFFFFFF;
  const bool need_local = e.local == 0xFFFFFFFF, need_disk = disk == 0xFFFF;
  if (!need_size && !need_compressed && !need_local && !need_disk) return;
  const uint64_t end = pos + len;
  while (end - pos >= 4) {
    const uint64_t id = at(pos, 2), field_len = at(pos + 2, 2);
    if (field_len > end - pos - 4) break;
    if (id == 0x0001) {
      uint64_t q = pos + 4;
      const uint64_t field_end = q + field_len;
      const auto take = [&](int width, uint64_t& out) {
        if (!fits(q, width, field_end))
          damaged("entry '" + shown(e.name) + "' has a short zip64 extra field");
        out = at(q, width);
        q += width;
      };
      if (need_size) take(8, e.size);
      if (need_compressed) take(8, e.compressed);
      if (need_local) take(8, e.local);
      if (need_disk) take(4, disk);
      return;
    }
    pos += 4 + field_len;
  }
  damaged("entry '" + shown(e.name) + "' needs a zip64 extra field, and has none");
}

void ZipArchive::read_local_header(ZipEntry& e, uint64_t cd_offset) {
  if (!fits(e.local, 30, cd_offset) || at(e.local, 4) != kLocalSig)
    damaged("entry '" + shown(e.name) + "' has no local header at offset " +
            std::to_string(e.local));
  const uint64_t name_len = at(e.local + 26, 2), extra_len = at(e.local + 28, 2);
  if (name_len != e.name.size() || !fits(e.local + 30, name_len, cd_offset) ||
      std::memcmp(p_ + e.local + 30, e.name.data(), name_len) != 0)
    damaged("the local header of entry '" + shown(e.name) + "' names another entry");
  if (at(e.local + 8, 2) != e.method)
    damaged("entry '" + shown(e.name) + "' has two compression methods");
  e.data = e.local + 30 + name_len + extra_len;
  if (!fits(e.data, e.compressed, cd_offset))
    damaged("the data of entry '" + shown(e.name) + "' runs past the central directory");
}

}  // namespace parity::dumps
