// The crash guard: a read of a file that may be damaged, tried first in a forked child.
//
// HDF5 1.10 can crash or hang on damaged bytes instead of reporting an error. Every reader of
// a file that came from outside this process (dumps, ledgers) calls parse_guarded before its
// own read, so that such bytes become one DumpError line naming the file, not a crash.
#pragma once

#include <functional>
#include <string>

namespace parity::dumps {

// Runs `parse` (a read of `path`) in a forked child, killed after 120 s. If the child dies of
// a signal, throws DumpError "'<path>' is damaged (...); <remedy>". Exceptions in the child are
// ignored: the caller's own read, which follows, reports them. Where fork fails, returns and
// the caller reads directly.
void parse_guarded(const std::string& path, const std::function<void()>& parse,
                   const std::string& remedy);

}  // namespace parity::dumps
