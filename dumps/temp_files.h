// The temporary files this process is writing, so that a stop (SIGINT, SIGTERM, SIGHUP) can
// remove them: every file parity writes goes to "<path>.tmp.<pid>" first and is renamed onto
// its path when it is complete, so a stopped run leaves neither a half-written file nor a
// temporary one behind.
//
// The registry has fixed slots and takes no lock: remove_temp_files() is async-signal-safe
// (it calls unlink(2) only) and is what the stop handler (harness/process.h) calls. A forked
// child inherits the registry with the files its parent had open, which it may finish or
// remove in its turn.
#pragma once

#include <string>
#include <system_error>

namespace parity::dumps {

// "<path>.tmp.<pid of this process>".
std::string temp_path_for(const std::string& path);

// Adds or drops one path. Registering more files than the registry has slots (256) leaves the
// extra ones unregistered: they are still written and renamed, only a stop cannot remove them.
void register_temp_file(const std::string& path);
void unregister_temp_file(const std::string& path);

// A directory this process created for its outputs: a stop removes it if it is empty by then
// (rmdir(2)), after the files.
void register_temp_dir(const std::string& path);
void unregister_temp_dir(const std::string& path);

// Makes the directory `path` (with its parents) when it does not exist yet, registered as
// above from before it exists, so that no stop can fall between the two. Returns its absolute
// path when this call made it, "" when it was a directory already or is none now (then `ec`
// says why, "not a directory" for an existing file, and nothing stays registered).
std::string make_temp_dir(const std::string& path, std::error_code& ec);

// Removes every registered file, then every registered directory that is empty.
// Async-signal-safe.
void remove_temp_files() noexcept;

// A text file written to its temporary name and renamed onto `path` by commit(); destroyed
// without commit() it removes the temporary. Throws std::runtime_error naming the path and the
// system's reason when the file cannot be opened, written or renamed.
class AtomicTextFile {
 public:
  explicit AtomicTextFile(std::string path);
  AtomicTextFile(const AtomicTextFile&) = delete;
  AtomicTextFile& operator=(const AtomicTextFile&) = delete;
  ~AtomicTextFile();

  void write(const std::string& text);  // appends; flushed line by line
  void commit();                        // flush, fsync, rename
  bool committed() const { return fd_ < 0; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }

 private:
  std::string path_, temp_;
  int fd_ = -1;
};

// The whole of `text` as `path`, atomically (an AtomicTextFile written and committed).
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace parity::dumps
