#!/usr/bin/python3
"""The JaxTrainer example, placed by sliced.

Ray Train's JaxTrainer snippet asks for one v6e 4x4 slice (4 hosts, 4 workers):

    trainer = JaxTrainer(
        train_loop_per_worker=train_func,
        scaling_config=ScalingConfig(
            use_tpu=True,
            num_workers=4,
            topology="4x4",
            accelerator_type="TPU-V6E",
            placement_strategy="SPREAD",
        ),
    )

This script submits the same ScalingConfig to sliced, waits until the slice is
placed, prints where each worker runs and the env JAX needs there, and then
releases the placement (as a finished trainer would; --keep keeps it). A wait
that times out or is interrupted (Ctrl-C) removes the group too.

Run it against a daemon with the demo fleet registered (see docs/clients.md):
    /usr/bin/python3 examples/jaxtrainer_example.py --address 127.0.0.1:50051
"""
import argparse
import os
import sys

# The client lives in client/python of this repo (its stubs in build/python
# after the build, or $SLICED_PY); an installed sliced_client works as well.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, "client", "python"))

from sliced_client import Client, ScalingConfig, SlicedError  # noqa: E402

scaling_config = ScalingConfig(
    use_tpu=True,
    num_workers=4,
    topology="4x4",
    accelerator_type="TPU-V6E",
    placement_strategy="SPREAD",
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", default=os.environ.get("SLICED_SERVER", "127.0.0.1:50051"))
    parser.add_argument("--job-id", default="jaxtrainer-example")
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds to wait for the slice")
    parser.add_argument("--keep", action="store_true", help="keep the placement")
    args = parser.parse_args()

    try:
        with Client(args.address) as client:
            # Removed when the block ends, and if the wait times out or is
            # interrupted (unless --keep).
            with client.placement(scaling_config, job_id=args.job_id,
                                  timeout=args.timeout, keep=args.keep) as pg:
                print("%s is %s on slice(s) %s" % (pg.id, pg.state, ", ".join(pg.slice_names)))
                for worker in pg.workers:
                    print("worker %d on %s (%s):" % (worker.rank, worker.node_id, worker.address))
                    for key, value in sorted(worker.env.items()):
                        print("  %s=%s" % (key, value))
            print("kept %s" % pg.id if args.keep else "released %s" % pg.id)
    except SlicedError as e:
        print("jaxtrainer_example: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
