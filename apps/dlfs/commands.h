// The `dlfs` verbs. Each returns the process exit code:
//   0 success, 1 the volume was read but is damaged (verify), 2 bad input or
//   an error (message on stderr naming the file and the problem).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dlfs::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitDamaged = 1;
inline constexpr int kExitError = 2;

struct PackArgs {
  std::string source;
  std::string output;
  std::string from = "auto";
  uint32_t align = 1;
  bool force = false;
  bool skip_unreadable = false;
  std::string class_names;  // "a,b,c" or "@file" (one name per line)
  bool quiet = false;
};
int RunPack(const PackArgs& args);

struct InfoArgs {
  std::string volume;
  bool json = false;
};
int RunInfo(const InfoArgs& args);

struct LsArgs {
  std::string volume;
  std::string dir;
  bool json = false;
  bool recursive = false;
};
int RunLs(const LsArgs& args);

struct CatArgs {
  std::string volume;
  std::string path;
  std::optional<uint64_t> index;
  bool no_verify = false;
};
int RunCat(const CatArgs& args);

struct VerifyArgs {
  std::string volume;
  bool quiet = false;
};
int RunVerify(const VerifyArgs& args);

}  // namespace dlfs::cli
