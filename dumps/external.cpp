#include "dumps/external.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "dumps/dcp.h"
#include "dumps/guard.h"
#include "dumps/tensor_file.h"
#include "spec/limits.h"
#include "spec/printable.h"
#include "spec/whole_file.h"

namespace parity::dumps {

namespace fs = std::filesystem;

namespace {

const char* kKinds = "a parity dump, a torch.save archive (zip), a safetensors file or an HDF5 file";

// Opening a named pipe blocks until a writer comes, and a device never ends: refuse anything
// that exists and is neither a regular file nor a directory, before opening it.
void require_regular(const std::string& path) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!ec && fs::exists(st) && !fs::is_regular_file(st) && !fs::is_directory(st))
    throw DumpError("'" + path + "' is not a regular file (a pipe, a device or a socket); copy "
                    "what it holds to a file and give that");
}

// The whole file, read once into a buffer of its size (no doubling stream buffer), refused
// past spec::max_file_bytes() before anything is allocated.
std::string read_bytes(const std::string& path) {
  return spec::read_whole_file(path, static_cast<uint64_t>(spec::max_file_bytes()),
                               "raise PARITY_MAX_FILE_BYTES for a trusted file",
                               [&](const std::string& why) { throw DumpError("'" + path + "' " + why); });
}

std::string head_bytes(const std::string& path, size_t n) {
  require_regular(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DumpError("cannot open '" + path + "'; check the path and its permissions");
  std::string s(n, '\0');
  in.read(&s[0], static_cast<std::streamsize>(n));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// The most links an HDF5 file's walk follows: far above a model's tensor count.
constexpr int64_t kMaxH5Links = 1'000'000;

// The walk's state: each group's address and path, so that a group reached twice through hard
// links (a cycle, or 25 doubled levels making 2^25 paths of a 30 KB file) is refused at once,
// and the links followed so far.
struct Walk {
  std::map<uint64_t, std::string> groups;
  int64_t links = 0;
};

// Every dataset below `group`, depth first in the file's order, named by its path without the
// leading '/'. Each group is entered once and the links are counted, so the work is linear in
// the file's links, whatever its link structure.
void collect_datasets(const h5::File& f, const std::string& group, std::vector<NamedArray>& out,
                      int depth, Walk& walk) {
  if (depth > 64) throw DumpError("'" + f.path() + "': groups nested deeper than 64 levels");
  const auto [seen, fresh] = walk.groups.emplace(h5::object_address(f, group), group);
  if (!fresh)
    throw DumpError("'" + f.path() + "': group '" + spec::printable(group) + "' is group '" +
                    spec::printable(seen->second) +
                    "' again (hard links): its tensors would be read under two names; give a "
                    "file whose groups each have one path (h5py: copy them, do not link)");
  for (const auto& child : h5::list(f, group)) {
    if (++walk.links > kMaxH5Links)
      throw DumpError("'" + f.path() + "': holds more than " + std::to_string(kMaxH5Links) +
                      " links, more than parity follows; give a file of one run's tensors");
    const std::string path = (group == "/" ? "" : group) + "/" + child;
    if (h5::is_group(f, path))
      collect_datasets(f, path, out, depth + 1, walk);
    else
      out.push_back({path.substr(1), h5::read(f, path)});
  }
}

void collect_datasets(const h5::File& f, std::vector<NamedArray>& out) {
  Walk walk;
  collect_datasets(f, "/", out, 0, walk);
}

std::vector<NamedArray> read_h5_tensors(const std::string& path) {
  parse_guarded(
      path,
      [&] {
        auto f = h5::File::open_read(path);
        std::vector<NamedArray> scratch;
        collect_datasets(f, scratch);
      },
      "write it again with h5py");
  try {
    auto f = h5::File::open_read(path);
    if (h5::has_attr(f, "/", "schema") && h5::attr_string(f, "/", "schema") == "parity-checkpoint")
      throw DumpError("'" + path + "' is a parity seed checkpoint (parity init), not a run; give "
                      "a run's dump (parity train --dump) or a file of a run's tensors");
    std::vector<NamedArray> out;
    collect_datasets(f, out);
    return out;
  } catch (const h5::Error& e) {
    throw DumpError(std::string("cannot read '") + path + "': " + e.what());
  }
}

std::vector<NamedArray> read_tensors(const std::string& path, FileKind kind) {
  switch (kind) {
    case FileKind::TorchSave: return read_torch_save(path, read_bytes(path));
    case FileKind::Safetensors: return read_safetensors(path, read_bytes(path));
    case FileKind::Hdf5: return read_h5_tensors(path);
    case FileKind::Dcp: return read_dcp(path);
    default:
      throw DumpError("'" + path + "' is not " + std::string(kKinds) +
                      " (judged by its content); give a file of one of these kinds");
  }
}

// Puts one named tensor into its group of the step.
void place(StepDump& sd, const std::string& name, h5::Array a, const std::string& source,
           std::map<std::string, std::string>& origin) {
  std::map<std::string, StoredTensor>* dst = &sd.params;
  std::string fqn = name;
  for (const char* g : {"grads", "params", "buffers"})
    for (const char sep : {'.', '/'}) {
      const std::string prefix = std::string(g) + sep;
      if (starts_with(name, prefix) && name.size() > prefix.size()) {
        fqn = name.substr(prefix.size());
        dst = std::string(g) == "grads" ? &sd.grads : std::string(g) == "params" ? &sd.params
                                                                                 : &sd.buffers;
      }
    }
  const std::string group = dst == &sd.grads ? "grads/" : dst == &sd.params ? "params/" : "buffers/";
  const std::string key = group + fqn;
  if (dst->count(fqn))
    throw DumpError("'" + source + "' and '" + origin[key] + "' both hold " + key +
                    "; a directory's files must hold different tensors (one file per rank)");
  origin[key] = source;
  (*dst)[fqn] = std::move(a);
  // Listed once in writing order: already listed exactly when the other of grads and params
  // holds it (a lookup, not a scan of the list: 200,000 tensors were quadratic).
  if (dst == &sd.grads ? !sd.params.count(fqn) : dst == &sd.params && !sd.grads.count(fqn))
    sd.fqns.push_back(fqn);
}

void rename_all(Dump& d, const NameMap& names) {
  if (names.empty()) return;
  for (auto& [step, sd] : d.steps) {
    for (auto* group : {&sd.grads, &sd.params, &sd.buffers}) {
      std::map<std::string, StoredTensor> renamed;
      for (auto& [fqn, t] : *group) {
        const std::string to = names.apply(fqn);
        if (renamed.count(to))
          throw DumpError("--map sends two tensors of '" + d.source + "' to '" + to +
                          "'; give each its own name");
        renamed[to] = std::move(t);
      }
      *group = std::move(renamed);
    }
    for (auto& fqn : sd.fqns) fqn = names.apply(fqn);
  }
}

}  // namespace

const char* to_string(FileKind k) {
  switch (k) {
    case FileKind::ParityDump: return "parity dump";
    case FileKind::Hdf5: return "HDF5";
    case FileKind::TorchSave: return "torch.save";
    case FileKind::Safetensors: return "safetensors";
    case FileKind::Dcp: return "DCP";
    case FileKind::Unknown: return "unknown";
  }
  return "?";
}

FileKind detect_kind(const std::string& path) {
  if (is_dcp_dir(path)) return FileKind::Dcp;
  const std::string h = head_bytes(path, 16);
  if (starts_with(h, std::string("\x89HDF\r\n\x1a\n", 8))) {
    try {
      auto f = h5::File::open_read(path);
      if (h5::exists(f, "/meta") && h5::has_attr(f, "/meta", "schema") &&
          h5::attr_string(f, "/meta", "schema") == "parity-dump")
        return FileKind::ParityDump;
    } catch (const h5::Error&) {
      // A damaged HDF5 file: its reader says what is wrong.
    }
    return FileKind::Hdf5;
  }
  if (starts_with(h, std::string("PK\x03\x04", 4))) return FileKind::TorchSave;
  // The legacy (pre-1.6) torch.save format is a bare pickle: its reader refuses it by name.
  if (h.size() >= 2 && static_cast<unsigned char>(h[0]) == 0x80 && h[1] >= 2 && h[1] <= 5)
    return FileKind::TorchSave;
  // safetensors: an 8-byte little-endian header length, then the JSON header's '{'.
  if (h.size() >= 9 && h[8] == '{') return FileKind::Safetensors;
  return FileKind::Unknown;
}

std::string NameMap::apply(const std::string& name) const {
  auto e = exact.find(name);
  if (e != exact.end()) return e->second;
  for (const auto& [from, to] : prefixes)
    if (starts_with(name, from)) return to + name.substr(from.size());
  return name;
}

NameMap read_name_map(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw DumpError("--map '" + path + "' cannot be opened; give a readable file");
  NameMap m;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string from, to, extra;
    if (!(words >> from)) continue;
    const std::string where = "--map '" + path + "' line " + std::to_string(n) + ": ";
    if (!(words >> to) || (words >> extra))
      throw DumpError(where + "want two names, FROM TO (a trailing * maps a prefix)");
    const bool pf = from.back() == '*', pt = to.back() == '*';
    if (pf != pt)
      throw DumpError(where + "a prefix rule ends both names with '*' (" + from + " " + to + ")");
    if (pf) {
      m.prefixes.push_back({from.substr(0, from.size() - 1), to.substr(0, to.size() - 1)});
    } else {
      if (m.exact.count(from)) throw DumpError(where + "'" + from + "' is mapped twice");
      m.exact[from] = to;
    }
  }
  if (m.empty()) throw DumpError("--map '" + path + "' holds no rule; write lines FROM TO");
  return m;
}

std::vector<NamedArray> read_tensor_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) && !is_dcp_dir(path))
    throw DumpError("'" + path + "' is not a file or a DCP checkpoint directory; give a "
                    "torch.save or safetensors file, or a directory holding .metadata");
  const FileKind kind = detect_kind(path);
  if (kind == FileKind::ParityDump)
    throw DumpError("'" + path + "' is a parity dump, not a state dict; give a torch.save or "
                    "safetensors file");
  return read_tensors(path, kind);
}

bool is_parity_dump(const Dump& d) { return d.meta.count("flavor") != 0; }

Dump read_run(const std::string& path, const NameMap& names, int64_t step) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw DumpError("'" + path + "' does not exist; give a dump, a torch.save or safetensors "
                    "file, an HDF5 file, or a directory of them");
  std::vector<std::string> files;
  // A DCP directory is one checkpoint, however many rank files it has.
  if (fs::is_directory(path, ec) && !is_dcp_dir(path)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw DumpError("directory '" + path + "' holds no file; give a run's files");
    // A directory of parity rank files is a parity dump.
    bool any_parity = false;
    for (const auto& f : files) any_parity |= detect_kind(f) == FileKind::ParityDump;
    if (any_parity) {
      Dump d = read_dump(path);
      rename_all(d, names);
      return d;
    }
  } else {
    if (detect_kind(path) == FileKind::ParityDump) {
      Dump d = read_dump(path);
      rename_all(d, names);
      return d;
    }
    files.push_back(path);
  }

  Dump d;
  d.source = path;
  auto& sd = d.steps[step];
  sd.step = step;
  std::map<std::string, std::string> origin;
  std::string kinds;
  for (const auto& file : files) {
    const FileKind kind = detect_kind(file);
    if (kind == FileKind::Unknown)
      throw DumpError("'" + file + "' is not " + std::string(kKinds) +
                      " (judged by its content); keep only the run's files in '" + path + "'");
    if (kinds.find(to_string(kind)) == std::string::npos)
      kinds += std::string(kinds.empty() ? "" : ", ") + to_string(kind);
    for (auto& t : read_tensors(file, kind)) place(sd, t.name, std::move(t.array), file, origin);
  }
  d.meta["kind"] = kinds;
  d.meta["source"] = path;
  rename_all(d, names);
  return d;
}

}  // namespace parity::dumps
