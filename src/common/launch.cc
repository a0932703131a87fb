#include "dlfs/launch.h"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace dlfs {

namespace {

using Getenv = std::function<const char*(const char*)>;

// The variables of one launcher, read as whole numbers.
class Reader {
 public:
  Reader(const Getenv& getenv, Launcher launcher) : getenv_(getenv), launcher_(launcher) {}

  bool Has(const char* name) const {
    const char* v = getenv_(name);
    return v != nullptr && *v != '\0';
  }
  // nullopt when unset; an error in status() when set but not a number.
  std::optional<int> Int(const char* name) {
    const char* v = getenv_(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    int out = 0;
    const std::string_view s(v);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec != std::errc() || end != s.data() + s.size() || out < 0) {
      Fail(std::string(name) + "='" + v + "' is not a whole number");
      return std::nullopt;
    }
    return out;
  }
  const char* Raw(const char* name) const { return getenv_(name); }
  void Fail(const std::string& why) {
    if (status_.ok()) {
      status_ = Status::InvalidArgument(std::string(NameOf(kLauncherNames, launcher_)) +
                                        " launch: " + why);
    }
  }
  const Status& status() const { return status_; }

 private:
  const Getenv& getenv_;
  Launcher launcher_;
  Status status_;
};

// The task count of node `node` in a Slurm list such as "2(x3),1"; nullopt
// when the list is malformed or too short.
std::optional<int> TasksOnNode(std::string_view list, int node) {
  std::vector<int> counts;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == list.npos ? std::string_view() : list.substr(comma + 1);
    int count = 0, repeat = 1;
    const size_t paren = item.find("(x");
    const std::string_view head = item.substr(0, paren);
    if (std::from_chars(head.data(), head.data() + head.size(), count).ptr !=
        head.data() + head.size()) {
      return std::nullopt;
    }
    if (paren != item.npos) {
      const std::string_view times = item.substr(paren + 2, item.size() - paren - 3);
      if (item.back() != ')' ||
          std::from_chars(times.data(), times.data() + times.size(), repeat).ptr !=
              times.data() + times.size()) {
        return std::nullopt;
      }
    }
    for (int i = 0; i < repeat && counts.size() < 1'000'000; ++i) counts.push_back(count);
  }
  if (counts.empty()) return std::nullopt;
  bool uniform = true;
  for (int c : counts) uniform = uniform && c == counts[0];
  if (uniform) return counts[0];
  if (node < 0 || node >= static_cast<int>(counts.size())) return std::nullopt;
  return counts[node];
}

// Fills rank, world and the local layout from the named variables; checks
// that they fit together.
void ReadLayout(Reader& r, LaunchInfo* info, const char* rank, const char* world,
                const char* local_rank, const char* local_world) {
  info->rank = r.Int(rank).value_or(0);
  info->world_size = r.Int(world).value_or(1);
  info->local_rank = local_rank ? r.Int(local_rank).value_or(0) : 0;
  info->local_world_size = local_world ? r.Int(local_world).value_or(1) : 1;
  if (!r.status().ok()) return;
  if (info->world_size < 1) {
    r.Fail(std::string(world) + "=" + std::to_string(info->world_size) + " is not a world size");
  } else if (info->rank >= info->world_size) {
    r.Fail(std::string(rank) + "=" + std::to_string(info->rank) + " is not below " + world + "=" +
           std::to_string(info->world_size));
  } else if (local_world != nullptr &&
             (info->local_world_size < 1 || info->local_world_size > info->world_size)) {
    r.Fail(std::string(local_world) + "=" + std::to_string(info->local_world_size) +
           " does not fit " + world + "=" + std::to_string(info->world_size));
  } else if (local_rank != nullptr && local_world != nullptr &&
             info->local_rank >= info->local_world_size) {
    r.Fail(std::string(local_rank) + "=" + std::to_string(info->local_rank) + " is not below " +
           local_world + "=" + std::to_string(info->local_world_size));
  }
}

// Slurm's variables, when set, that the launcher found does not use.
void NoteIgnoredSlurm(const Getenv& getenv, LaunchInfo* info, const std::string& why) {
  const char* procid = getenv("SLURM_PROCID");
  if (procid != nullptr && *procid != '\0') {
    info->notes.push_back(std::string("SLURM_PROCID=") + procid + " ignored: " + why);
  }
}

}  // namespace

Result<LaunchInfo> DetectLaunch(const Getenv& getenv) {
  LaunchInfo info;
  auto has = [&](const char* name) {
    const char* v = getenv(name);
    return v != nullptr && *v != '\0';
  };
  if (has("RANK") && has("WORLD_SIZE") && has("LOCAL_RANK") && has("LOCAL_WORLD_SIZE")) {
    Reader r(getenv, Launcher::kTorchrun);
    info.launcher = Launcher::kTorchrun;
    ReadLayout(r, &info, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    info.node = r.Int("GROUP_RANK").value_or(-1);
    DLFS_RETURN_IF_ERROR(r.status());
    NoteIgnoredSlurm(getenv, &info, "torchrun's RANK is the rank (SLURM_PROCID counts srun tasks)");
    return info;
  }
  if (has("OMPI_COMM_WORLD_RANK") && has("OMPI_COMM_WORLD_SIZE")) {
    Reader r(getenv, Launcher::kOpenMpi);
    info.launcher = Launcher::kOpenMpi;
    ReadLayout(r, &info, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
               has("OMPI_COMM_WORLD_LOCAL_RANK") ? "OMPI_COMM_WORLD_LOCAL_RANK" : nullptr,
               has("OMPI_COMM_WORLD_LOCAL_SIZE") ? "OMPI_COMM_WORLD_LOCAL_SIZE" : nullptr);
    DLFS_RETURN_IF_ERROR(r.status());
    info.mpi_launch = true;
    NoteIgnoredSlurm(getenv, &info,
                     "under mpirun inside a Slurm allocation it is alike on every rank");
    return info;
  }
  if (has("SLURM_STEP_ID") && has("SLURM_PROCID")) {
    Reader r(getenv, Launcher::kSlurm);
    info.launcher = Launcher::kSlurm;
    const char* world = has("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    ReadLayout(r, &info, "SLURM_PROCID", world, has("SLURM_LOCALID") ? "SLURM_LOCALID" : nullptr,
               nullptr);
    info.node = r.Int("SLURM_NODEID").value_or(-1);
    DLFS_RETURN_IF_ERROR(r.status());
    const char* per_node =
        has("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    if (const char* list = r.Raw(per_node); list != nullptr && *list != '\0') {
      if (auto n = TasksOnNode(list, info.node); n && *n >= 1 && *n <= info.world_size) {
        info.local_world_size = *n;
      } else {
        info.notes.push_back(std::string(per_node) + "='" + list +
                             "' ignored: not a task count for this node");
      }
    }
    if (info.local_rank >= info.local_world_size) info.local_world_size = info.local_rank + 1;
    // srun --mpi=pmix gives the tasks PMIx, through which Open MPI starts.
    info.mpi_launch = has("PMIX_RANK");
    if (!info.mpi_launch) {
      info.notes.push_back(
          "srun without a PMIx plugin: MPI cannot start in these tasks (run `srun --mpi=pmix` "
          "for MPI; Debian's Open MPI has no PMI-2)");
    }
    return info;
  }
  if (has("PMI_RANK") && has("PMI_SIZE")) {
    Reader r(getenv, Launcher::kHydra);
    info.launcher = Launcher::kHydra;
    ReadLayout(r, &info, "PMI_RANK", "PMI_SIZE",
               has("MPI_LOCALRANKID") ? "MPI_LOCALRANKID" : nullptr,
               has("MPI_LOCALNRANKS") ? "MPI_LOCALNRANKS" : nullptr);
    DLFS_RETURN_IF_ERROR(r.status());
    return info;
  }
  if (has("MV2_COMM_WORLD_RANK") && has("MV2_COMM_WORLD_SIZE")) {
    Reader r(getenv, Launcher::kMvapich);
    info.launcher = Launcher::kMvapich;
    ReadLayout(r, &info, "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
               has("MV2_COMM_WORLD_LOCAL_RANK") ? "MV2_COMM_WORLD_LOCAL_RANK" : nullptr,
               has("MV2_COMM_WORLD_LOCAL_SIZE") ? "MV2_COMM_WORLD_LOCAL_SIZE" : nullptr);
    DLFS_RETURN_IF_ERROR(r.status());
    return info;
  }
  if (has("RANK") || has("WORLD_SIZE")) {
    Reader r(getenv, Launcher::kEnv);
    info.launcher = Launcher::kEnv;
    ReadLayout(r, &info, "RANK", "WORLD_SIZE", has("LOCAL_RANK") ? "LOCAL_RANK" : nullptr,
               has("LOCAL_WORLD_SIZE") ? "LOCAL_WORLD_SIZE" : nullptr);
    DLFS_RETURN_IF_ERROR(r.status());
    // Without LOCAL_*: as if every process ran on this node.
    if (!has("LOCAL_WORLD_SIZE")) info.local_world_size = info.world_size;
    if (!has("LOCAL_RANK")) info.local_rank = info.rank;
    return info;
  }
  if (has("PMIX_RANK")) {
    // PMIx without a launcher's own variables (e.g. prterun): MPI knows the rest.
    info.mpi_launch = true;
    info.launcher = Launcher::kOpenMpi;
    info.notes.push_back("PMIX_RANK set without a world size: MPI gives the layout");
  }
  return info;
}

std::string DescribeLaunch(const LaunchInfo& info) {
  if (info.launcher == Launcher::kNone && !info.mpi_launch) return "one process";
  std::string out = "rank " + std::to_string(info.rank) + " of " + std::to_string(info.world_size) +
                    " (local " + std::to_string(info.local_rank) + " of " +
                    std::to_string(info.local_world_size);
  if (info.node >= 0) out += ", node " + std::to_string(info.node);
  out += ") from " + std::string(NameOf(kLauncherNames, info.launcher));
  return out;
}

}  // namespace dlfs
