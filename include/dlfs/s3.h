// Targets in an object store that speaks S3 (AWS S3, Ceph's RADOS Gateway,
// MinIO), read with ranged GETs signed with SigV4 (libcurl); docs/deploy.md,
// "Volumes on object storage".
//
// A target is named s3://BUCKET/KEY wherever a path is accepted (the volume
// given to Volume::Open and the loaders, the target table, --target-map).
// Where the server is and who asks come from the standard places, first
// found wins:
//   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
//                endpoint_url in ~/.aws/config, else https://s3.REGION.amazonaws.com
//   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1
//   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
//                else the profile's in ~/.aws/credentials
//   profile      AWS_PROFILE, else "default"; the files' places AWS_CONFIG_FILE
//                and AWS_SHARED_CREDENTIALS_FILE
// Objects are addressed path-style (ENDPOINT/BUCKET/KEY), which every S3
// server takes.
//
// A volume is written to s3:// (`dlfs pack -o`, VolumeBuilder, dlfs.Writer)
// by a multipart upload streamed as it is packed (never whole on local
// disk); the object appears under its key only once complete, and an
// existing one is replaced only with overwrite (--force).
//
// DLFS_S3_TIMEOUT (seconds) and DLFS_S3_RETRIES, when set, replace
// S3Options' timeout_seconds and retries in every request of the process
// (a job's bound on a server that stops answering, without code).
// DLFS_S3_VERBOSE=1 prints libcurl's exchanges with the server on stderr.
//
// An object is pinned by its ETag when first opened: every later read asks
// for that version only (If-Match), so an object replaced while a job reads
// it fails the read, naming the URL, and is never read as a mix of two
// volumes.
#pragma once

#include <cstdint>
#include <string_view>

namespace dlfs {

struct S3Options {
  // A request that has not completed within this many seconds fails
  // (and is retried as below).
  double timeout_seconds = 30;
  // Failures worth another try (5xx, 503 SlowDown, 429, a connection
  // refused or reset, a timeout) are retried this many times, with a
  // backoff doubling from retry_delay_seconds; then the read fails with the
  // last error, naming the URL. A server gone away ends a read within about
  // timeout × (1 + retries) + the backoffs.
  uint32_t retries = 4;
  double retry_delay_seconds = 0.05;
};

// True when `path` is an s3:// URL.
bool IsS3Url(std::string_view path);

// True when this build has libcurl (otherwise an s3:// target is Unavailable).
bool S3Supported();

}  // namespace dlfs
