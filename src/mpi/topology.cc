#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlfs/mpi.h"

namespace dlfs {

Status MpiError(int code, const std::string& what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  return Status::IOError(what + ": MPI error " + std::to_string(code) +
                         (len > 0 ? " (" + std::string(text, len) + ")" : ""));
}

int RunMpiProgram(const std::function<int(int rank, int world)>& body) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int rc = body(rank, world);
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}

void WaitPolitely(MPI_Request* request, MPI_Status* status) {
  int done = 0;
  for (int spin = 0; spin < 200; ++spin) {
    MPI_Test(request, &done, status);
    if (done) return;
  }
  timespec pause{0, 5'000};
  while (true) {
    MPI_Test(request, &done, status);
    if (done) return;
    nanosleep(&pause, nullptr);
    pause.tv_nsec = std::min<long>(pause.tv_nsec * 2, 200'000);
  }
}

Status AgreeOnStatus(MPI_Comm comm, const Status& local) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const int mine = local.ok() ? INT_MAX : rank;
  int first = INT_MAX;
  MPI_Request request;
  MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, &request);
  WaitPolitely(&request);
  if (first == INT_MAX) return Status::Ok();
  // The errno travels too: it decides the error's kind where the code alone
  // does not (Python's FileNotFoundError against KeyError for kNotFound), so
  // every rank reports what rank `first` met, as a single process would.
  int header[3] = {static_cast<int>(local.code()), static_cast<int>(local.message().size()),
                   local.sys_errno()};
  MPI_Bcast(header, 3, MPI_INT, first, comm);
  std::string message = local.message();
  message.resize(static_cast<size_t>(header[1]));
  MPI_Bcast(message.data(), header[1], MPI_CHAR, first, comm);
  return Status(static_cast<StatusCode>(header[0]),
                "rank " + std::to_string(first) + ": " + message, header[2]);
}

namespace {

// FNV-1a: the same on every rank and every build, unlike std::hash.
uint64_t Fingerprint(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// name '\0' value '\0', for every value.
std::string Serialize(const std::vector<NamedValue>& values) {
  std::string out;
  for (const NamedValue& v : values) {
    out += v.name;
    out += '\0';
    out += v.value;
    out += '\0';
  }
  return out;
}

std::vector<NamedValue> Deserialize(std::string_view bytes) {
  std::vector<NamedValue> out;
  while (!bytes.empty()) {
    NamedValue v;
    size_t end = bytes.find('\0');
    v.name = bytes.substr(0, end);
    bytes.remove_prefix(std::min(bytes.size(), end + 1));
    end = bytes.find('\0');
    v.value = bytes.substr(0, end);
    bytes.remove_prefix(std::min(bytes.size(), end + 1));
    out.push_back(std::move(v));
  }
  return out;
}

// "rank 3" or "ranks 0-1,4" (ranks ascending); long lists are cut short.
std::string RankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  int runs = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (runs++ == 8) {
      out += ",...";
      break;
    }
    if (i > 0) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += '-' + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

Status AgreeOnValues(MPI_Comm comm, const std::vector<NamedValue>& values) {
  const std::string mine = Serialize(values);
  // max(h) and max(~h) = ~min(h) in one allreduce: equal iff all agree.
  const uint64_t h = Fingerprint(mine);
  uint64_t local[2] = {h, ~h}, global[2] = {0, 0};
  MPI_Request request;
  MPI_Iallreduce(local, global, 2, MPI_UINT64_T, MPI_MAX, comm, &request);
  WaitPolitely(&request);
  if (global[0] == ~global[1]) return Status::Ok();

  // They differ: every rank gathers every rank's values and writes the same
  // message.
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(ranks), displs(ranks);
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm);
  int total = 0;
  for (int r = 0; r < ranks; ++r) {
    displs[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), displs.data(), MPI_CHAR,
                 comm);
  std::vector<std::vector<NamedValue>> by_rank(ranks);
  size_t count = 0;
  for (int r = 0; r < ranks; ++r) {
    by_rank[r] = Deserialize(std::string_view(all).substr(displs[r], lengths[r]));
    count = std::max(count, by_rank[r].size());
  }
  std::string message;
  for (size_t i = 0; i < count; ++i) {
    // Groups of ranks holding the same value, in order of their lowest rank.
    std::string name;
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (int r = 0; r < ranks; ++r) {
      const bool has = i < by_rank[r].size();
      if (has && name.empty()) name = by_rank[r][i].name;
      const std::string value = has ? by_rank[r][i].value : "(none)";
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const auto& group) { return group.first == value; });
      if (g == groups.end()) {
        groups.push_back({value, {r}});
      } else {
        g->second.push_back(r);
      }
    }
    if (groups.size() < 2) continue;
    message += message.empty() ? "ranks disagree on " : " and on ";
    message += name + " (";
    for (size_t g = 0; g < groups.size(); ++g) {
      if (g == 4) {
        message += "; " + std::to_string(groups.size() - g) + " more values";
        break;
      }
      if (g > 0) message += "; ";
      std::string value = groups[g].first;
      if (value.size() > 120) value = value.substr(0, 117) + "...";
      message += value + " on " + RankList(groups[g].second);
    }
    message += ")";
  }
  // Only a fingerprint collision between different serializations that
  // parse the same could get here with an empty message; treat it as agreement.
  if (message.empty()) return Status::Ok();
  return Status::InvalidArgument(message);
}

void BarrierPolitely(MPI_Comm comm) {
  MPI_Request request;
  MPI_Ibarrier(comm, &request);
  WaitPolitely(&request);
}

namespace {

// Ranks per fake node from DLFS_RANKS_PER_NODE; 0 means "one node per host".
Result<int> FakeNodeSize() {
  const char* env = std::getenv("DLFS_RANKS_PER_NODE");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const long k = std::strtol(env, &end, 10);
  if (*end != '\0' || k < 0 || k > (1 << 20)) {
    return Status::InvalidArgument(std::string("DLFS_RANKS_PER_NODE='") + env +
                                   "' is not a rank count (a whole number >= 0)");
  }
  return static_cast<int>(k);
}

// How this rank sees DLFS_RANKS_PER_NODE, as compared between ranks: ranks
// that parse it the same way agree ("2" and "02"; unset and "0").
std::string FakeNodeSetting(const Result<int>& fake) {
  if (!fake.ok()) return "'" + std::string(std::getenv("DLFS_RANKS_PER_NODE")) + "' (invalid)";
  return *fake == 0 ? "unset or 0" : std::to_string(*fake);
}

}  // namespace

#define DLFS_MPI(call)                                           \
  do {                                                           \
    const int mpi_rc_ = (call);                                  \
    if (mpi_rc_ != MPI_SUCCESS) return MpiError(mpi_rc_, #call); \
  } while (0)

Result<NodeTopology> NodeTopology::Create(MPI_Comm world) {
  // Every split below is collective: ranks that see different layouts would
  // wait for each other forever, so they agree first.
  const Result<int> setting = FakeNodeSize();
  DLFS_RETURN_IF_ERROR(AgreeOnValues(world, {{"DLFS_RANKS_PER_NODE", FakeNodeSetting(setting)}}));
  DLFS_ASSIGN_OR_RETURN(const int fake, setting);
  NodeTopology t;
  t.world_ = world;
  DLFS_MPI(MPI_Comm_rank(world, &t.rank_));
  DLFS_MPI(MPI_Comm_size(world, &t.size_));
  MPI_Comm host = MPI_COMM_NULL;
  DLFS_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, t.rank_, MPI_INFO_NULL, &host));
  t.fake_nodes_ = fake > 0;
  if (fake > 0) {
    int host_rank = 0;
    MPI_Comm_rank(host, &host_rank);
    const int rc = MPI_Comm_split(host, host_rank / fake, host_rank, &t.node_);
    MPI_Comm_free(&host);
    if (rc != MPI_SUCCESS) return MpiError(rc, "splitting fake nodes");
  } else {
    t.node_ = host;
  }
  MPI_Comm_rank(t.node_, &t.local_rank_);
  MPI_Comm_size(t.node_, &t.local_size_);

  t.node_first_rank_ = t.rank_;
  DLFS_MPI(MPI_Bcast(&t.node_first_rank_, 1, MPI_INT, 0, t.node_));
  // Leaders are ordered by world rank, so node indices follow rank order.
  DLFS_MPI(MPI_Comm_split(world, t.local_rank_ == 0 ? 0 : MPI_UNDEFINED, t.rank_, &t.leaders_));
  int index_and_count[2] = {0, 1};
  if (t.local_rank_ == 0) {
    MPI_Comm_rank(t.leaders_, &index_and_count[0]);
    MPI_Comm_size(t.leaders_, &index_and_count[1]);
  }
  DLFS_MPI(MPI_Bcast(index_and_count, 2, MPI_INT, 0, t.node_));
  t.node_index_ = index_and_count[0];
  t.node_count_ = index_and_count[1];

  int mine = t.rank_ == t.node_first_rank_ + t.local_rank_ ? 1 : 0, all = 0;
  DLFS_MPI(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, world));
  t.contiguous_ = all != 0;
  return t;
}

#undef DLFS_MPI

NodeTopology::NodeTopology(NodeTopology&& other) noexcept { *this = std::move(other); }

NodeTopology& NodeTopology::operator=(NodeTopology&& other) noexcept {
  if (this != &other) {
    Release();
    world_ = other.world_;
    node_ = std::exchange(other.node_, MPI_COMM_NULL);
    leaders_ = std::exchange(other.leaders_, MPI_COMM_NULL);
    rank_ = other.rank_;
    size_ = other.size_;
    local_rank_ = other.local_rank_;
    local_size_ = other.local_size_;
    node_index_ = other.node_index_;
    node_count_ = other.node_count_;
    node_first_rank_ = other.node_first_rank_;
    contiguous_ = other.contiguous_;
    fake_nodes_ = other.fake_nodes_;
  }
  return *this;
}

std::string NodeTopology::node_name() const {
  return fake_nodes_ ? "-node" + std::to_string(node_index_) : "";
}

NodeTopology::~NodeTopology() { Release(); }

void NodeTopology::Release() {
  // Freeing after MPI_Finalize is an error; a topology outliving MPI just
  // leaks its communicators.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
  if (leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);
}

}  // namespace dlfs
