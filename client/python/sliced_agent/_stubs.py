"""The generated stubs the agent needs: the API's (through sliced_client's
lookup, which also puts the stub directory on sys.path) and libtpu's metric
service (sliced_libtpu/tpu_metric_service_pb2*.py, generated next to them)."""
from sliced_client._stubs import _DIR, sliced_pb2, sliced_pb2_grpc  # noqa: F401

try:
    from sliced_libtpu import tpu_metric_service_pb2 as libtpu_pb2  # noqa: F401
    from sliced_libtpu import tpu_metric_service_pb2_grpc as libtpu_pb2_grpc  # noqa: F401
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "sliced_agent: the libtpu metric stubs (sliced_libtpu/tpu_metric_service_pb2.py) "
        "are not in %r: rebuild (cmake --build build --target sliced_python_stubs) or "
        "reinstall the package. (%s)" % (_DIR, e)) from e
