"""The GCE metadata server, asked only when the machine is on GCE.

The rule (google-auth's): the server is used when GCE_METADATA_HOST names one
(host:port; tests and the simulated fleet point it at a fake on 127.0.0.1),
or when <root>/sys/class/dmi/id/product_name says "Google Compute Engine".
Otherwise find_metadata() returns None and nothing is ever sent.

Thread-safe: a Metadata holds no mutable state.
"""
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Mapping, Optional, Tuple

GCE_PRODUCT = "Google Compute Engine"
GCE_DEFAULT_HOST = "169.254.169.254"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class MetadataError(Exception):
    """The server answered badly; `path` names what was asked."""

    def __init__(self, path: str, message: str):
        super().__init__("metadata %s: %s" % (path, message))
        self.path = path


class Metadata:
    """A client of one metadata server (host or host:port)."""

    def __init__(self, host: str, timeout: float = 5.0):
        self.host = host
        self.base = "http://%s/computeMetadata/v1/" % host
        self.timeout = timeout

    def get(self, path: str) -> Optional[str]:
        """The value at `path` (e.g. "instance/attributes/tpu-env"), None if
        the server has none (404). Raises MetadataError on any other answer
        or a network failure."""
        return self.watch(path)[0]

    def watch(self, path: str, last_etag: Optional[str] = None,
              wait_seconds: int = 60) -> Tuple[Optional[str], Optional[str]]:
        """(value, ETag) of `path`; value None on 404. With last_etag (the
        ETag of the value last seen) a hanging GET: it returns at once when
        the value is no longer that one (it changed between two polls), else
        when it changes or after wait_seconds (the server's timeout_sec).
        Raises as get()."""
        url = self.base + path
        timeout = self.timeout
        if last_etag is not None:
            url += "?" + urllib.parse.urlencode({
                "wait_for_change": "true", "last_etag": last_etag,
                "timeout_sec": wait_seconds})
            timeout += wait_seconds
        request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
        try:
            with _NO_PROXY.open(request, timeout=timeout) as response:
                if response.headers.get("Metadata-Flavor") != "Google":
                    raise MetadataError(path, "the answer lacks Metadata-Flavor: Google")
                return (response.read().decode("utf-8", "replace"),
                        response.headers.get("ETag"))
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None, None
            raise MetadataError(path, "HTTP %d" % e.code) from None
        except (urllib.error.URLError, OSError) as e:
            raise MetadataError(path, str(getattr(e, "reason", e))) from None


def on_gce(root: str) -> bool:
    """True when <root>/sys/class/dmi/id/product_name names GCE."""
    try:
        with open(os.path.join(root, "sys/class/dmi/id/product_name")) as f:
            return f.read().strip() == GCE_PRODUCT
    except OSError:
        return False


def find_metadata(root: str, env: Mapping[str, str]) -> Optional[Metadata]:
    """The metadata server to use, or None off GCE (see the module comment)."""
    host = env.get("GCE_METADATA_HOST", "").strip()
    if host:
        return Metadata(host)
    if on_gce(root):
        return Metadata(GCE_DEFAULT_HOST)
    return None
