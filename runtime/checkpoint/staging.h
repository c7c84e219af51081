// The staging directories of checkpoint saves: <dir>/<tag>.tmp-XXXXXX, written by every rank and
// renamed to <dir>/<tag> by rank 0 once complete. A job killed during a save leaves its staging
// directory behind, so each one holds an owner file while it is written (its host, boot, process
// id and the process's start time), removed from the checkpoint just after the rename; the next
// save or load of the directory removes the staging directories whose owner no longer runs (a
// process of this host and boot that is gone, or whose pid another process now has, or a
// process of an earlier boot) and the empty ones (a save killed before it claimed its
// directory). One whose owner is on another host, or that holds files but no owner file (a save
// of an older ZRT, or one killed while claiming), is left as it is, with a warning naming it: no
// live job's files are ever removed.
// Thread-safety: plain functions; rank 0 calls them.
#pragma once

#include <string>
#include <vector>

namespace zrt::checkpoint {

// Writes `staging`'s owner file: this process. Throws IoError naming the file.
void claimStaging(const std::string& staging);
// Removes the owner file from a checkpoint that was a staging directory (best effort).
void releaseStaging(const std::string& checkpoint);
// Removes each stale staging directory of `dir` and returns their paths; logs a warning for one
// it cannot judge or cannot remove. Never throws for what it finds.
std::vector<std::string> removeStaleStaging(const std::string& dir);

}  // namespace zrt::checkpoint
