// The web view's static files (server/web/), compiled into the binary by
// cmake/EmbedFiles.cmake: no file is read at run time, nothing is fetched.
//
// Immutable; thread-safe.
#ifndef SLICED_SERVER_API_WEB_ASSETS_H_
#define SLICED_SERVER_API_WEB_ASSETS_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace sliced::server::api {

struct WebAsset {
  absl::string_view name;  // file name under server/web/, e.g. "app.js"
  absl::string_view content;
};

// Every file of server/web/, sorted by name; `count` entries.
const WebAsset* WebAssets(size_t* count);

// The asset named `name`; nullptr when there is none.
const WebAsset* FindWebAsset(absl::string_view name);

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_WEB_ASSETS_H_
