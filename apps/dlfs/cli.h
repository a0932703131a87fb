// What the `dlfs` verbs share. Each verb is one Add<Verb>(CLI::App&, int*
// exit_code) that declares its options and, when run, does its work through
// the library and stores its exit code: 0 success, 1 the volume was read but
// is damaged (verify), 2 bad input or an error (message on stderr naming the
// file and the problem).
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "dlfs/enum_names.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"
#include "dlfs_tools/option_table.h"
#include "dlfs_tools/report.h"

namespace dlfs::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitDamaged = 1;
inline constexpr int kExitError = 2;

// Prints "dlfs: MESSAGE" to stderr, the library's option names reworded
// as flags (kLoaderFlags, below); returns kExitError.
int Fail(const Status& st);

// The library names the loader's and sampler's options by their fields
// (dlfs/loader.h, dlfs/sampler.h, dlfs/mixture.h); Fail() says their flags
// instead, for every verb.
inline constexpr Rewording kLoaderFlags[] = {
    {"(the fields option)", "(--fields NAME,NAME...)"},
    {"(the fields option, one name)", "(--fields NAME)"},
    {"set cycle to", "use --cycle to"},
    {"(epoch_samples)", "(--epoch-samples)"},
    {"batch_size must", "--batch must"},
    {"a smaller batch_size", "a smaller --batch"},
    {"world_size must", "--world must"},
    {"below world_size", "below --world"},
    {"queue_depth must", "--queue-depth must"},
    {"io_threads must", "--io-threads must"},
    {"fewer io_threads", "fewer --io-threads"},
};

// The volume a verb opens, and how (where its targets are on this node).
struct VolumeArgs {
  std::string path;
  VolumeOpenOptions open;  // --target-map "1=PATH,2=PATH"
};
// The volume argument and --target-map.
void AddVolumeArgs(CLI::App* verb, VolumeArgs* args);
inline Result<std::shared_ptr<Volume>> OpenVolume(const VolumeArgs& args) {
  return Volume::Open(args.path, args.open);
}

// An option whose --help shows its default (the value `value` holds now).
template <typename T>
CLI::Option* AddDefaulted(CLI::App* verb, const std::string& name, T& value,
                          const std::string& help) {
  return verb->add_option(name, value, help)->capture_default_str();
}

// An option whose text `parse` (a library parser returning Result<T>)
// turns into *value; its error message becomes CLI11's "NAME: MESSAGE".
template <typename T, typename Parser>
CLI::Option* AddParsed(CLI::App* verb, const std::string& name, T* value, Parser parse,
                       const std::string& help) {
  return verb->add_option_function<std::string>(
      name,
      [name, value, parse](const std::string& text) {
        auto parsed = parse(text);
        if (!parsed.ok()) throw CLI::ValidationError(name + ": " + parsed.status().message());
        *value = *std::move(parsed);
      },
      help);
}

// Makes the options of `verb` declared since it had `first` options need
// `flag` (CLI11 then refuses "--dtype requires --decode" and says so in
// --help), e.g. NeedAllSince(verb, count_before, decode_flag).
inline void NeedAllSince(CLI::App* verb, size_t first, CLI::Option* flag) {
  const std::vector<CLI::Option*> options = verb->get_options();
  for (size_t i = first; i < options.size(); ++i) options[i]->needs(flag);
}

// A flag that sets *value to false (e.g. --no-verify for a default-on check).
void AddOffFlag(CLI::App* verb, const std::string& name, bool* value, const std::string& help);

// Which option types take a comma-separated list, or may be left unset
// (AddOption).
template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};
template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};

// One option's flags (see AddOptions).
template <typename Config, typename T>
void AddOption(CLI::App* verb, const options::Option<Config, T>& o, Config* config) {
  if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::optional<bool>>) {
    for (const options::FlagSetting& s : o.settings) {
      if (s.flag.empty()) continue;
      verb->add_flag_callback(
          std::string(s.flag), [o, config, v = s.value] { o.field(*config) = v; },
          std::string(s.help));
    }
  }
  if (o.flag.empty()) return;
  T& value = o.field(*config);
  const std::string name(o.flag), help(o.help);
  CLI::Option* added = nullptr;
  if (o.parse) {
    added = AddParsed(verb, name, &value, o.parse, help);
    if (!o.default_text.empty()) added->default_str(std::string(o.default_text));
  } else if constexpr (std::is_enum_v<T>) {
    std::vector<std::string> names;
    for (const auto& e : o.names) names.emplace_back(e.name);
    added = verb->add_option_function<std::string>(
                    name,
                    [&value, o](const std::string& text) {
                      auto parsed = options::ParseName(o.names, text, "value");
                      if (!parsed.ok()) throw CLI::ValidationError(parsed.status().message());
                      value = *parsed;
                    },
                    help)
                ->default_str(std::string(options::NameIn(o.names, value)))
                ->check(CLI::IsMember(names));
  } else if constexpr (IsOptional<T>::value) {
    added = verb->add_option_function<typename T::value_type>(
        name, [&value](const typename T::value_type& v) { value = v; }, help);
    if constexpr (IsVector<typename T::value_type>::value) added->delimiter(',');
  } else if constexpr (std::is_arithmetic_v<T> || std::is_same_v<T, std::string> ||
                       IsVector<T>::value) {
    added = verb->add_option(name, value, help);
    if constexpr (IsVector<T>::value) added->delimiter(',');
    if (o.show_default) added->capture_default_str();
    if (o.max > 0) added->check(CLI::Range(o.min, o.max));
  }
}

// The flags of every option of `table` (dlfs_tools/option_table.h) that has
// one, setting its field in *config (which outlives the parse).
template <typename Table, typename Config>
void AddOptions(CLI::App* verb, const Table& table, Config* config) {
  std::apply([&](const auto&... option) { (AddOption(verb, option, config), ...); }, table);
}

// Writes `text` (a report) to stdout as is.
void Print(const std::string& text);

inline ReportFormat FormatOf(bool json) { return json ? ReportFormat::kJson : ReportFormat::kText; }
// The progress line of long work (pack, verify): on stderr, only when it is
// a terminal and not --quiet, overwritten in place. Clear() it before
// printing anything else.
class ProgressLine {
 public:
  explicit ProgressLine(bool quiet);
  // The library's on_progress callback for reports `format` prints; empty
  // (no progress) when the line is not shown.
  template <typename Report>
  std::function<void(const Report&)> Callback(std::string (*format)(const Report&)) const {
    if (!shown_) return nullptr;
    return [format](const Report& r) { std::fputs(format(r).c_str(), stderr); };
  }
  void Clear() const;

 private:
  bool shown_;
};
// Writes `data` to `path` ("" or "-": stdout); returns the exit code.
int WriteOutput(const std::string& path, std::span<const std::byte> data);

// Launched by mpirun (OpenMPI, MPICH or PMIx variables are set)? Then
// `dlfs epoch` and `dlfs bench` run as one MPI job.
bool LaunchedByMpirun();
// Runs body(rank, world) between MPI_Init and MPI_Finalize (MPI builds
// only); every rank exits with the worst exit code of the job.
int RunWithMpi(const std::function<int(int rank, int world)>& body);
// For an error every rank of the job gets alike (a collective call's):
// rank 0 prints it; every rank returns kExitError.
inline int FailOnRank0(int rank, const Status& st) { return rank == 0 ? Fail(st) : kExitError; }

// The verbs (pack_verb.cc, read_verbs.cc, bench_verb.cc, lmdb_verbs.cc).
void AddPack(CLI::App& app, int* exit_code);
void AddInfo(CLI::App& app, int* exit_code);
void AddLs(CLI::App& app, int* exit_code);
void AddCat(CLI::App& app, int* exit_code);
void AddVerify(CLI::App& app, int* exit_code);
void AddRepair(CLI::App& app, int* exit_code);
void AddEpoch(CLI::App& app, int* exit_code);
void AddMount(CLI::App& app, int* exit_code);
void AddBench(CLI::App& app, int* exit_code);
void AddLmdb(CLI::App& app, int* exit_code);  // lmdb info, lmdb read

}  // namespace dlfs::cli
