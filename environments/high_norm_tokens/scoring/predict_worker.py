"""Runs the agent's `predict.py` in a confined child and sends its prediction back as JSON.

score.py starts this file's source with `python -c` under the scoring helper's confinement
(the environment kit's ConfinedChild, rebench/kit/confined.py):

    python -c SOURCE READ_FD WRITE_FD SOLUTION_DIR BLOCKS_PATH CONFIG_JSON THREADS

It loads the blocks' weights (tensors only, `weights_only=True`) from the agent's home, where
there is no token or position embedding, imports predict.py and calls
`predict(blocks, config)` once the scorer says so (after a "ready" reply: the time limit covers
predict.py's import and call, not torch's import). The reply is plain JSON: {"explode_layer", "decay_layer",
"direction"} or {"error"}; the scorer checks every value and gives the child `predict_timeout_s`.
"""

import json
import sys
import traceback

from rebench.kit.confined import Channel, import_file


def main():
    channel = Channel(sys.argv)
    solution, blocks_path, config_json, threads = channel.args
    import torch

    torch.set_num_threads(int(threads))
    try:
        blocks = torch.load(blocks_path, map_location="cpu", weights_only=True)
    except Exception as exc:
        channel.send({"error": f"cannot load {blocks_path}: {type(exc).__name__}: {exc}"[:400]})
        return
    channel.send({"ready": True})  # the time limit starts with the next message: torch's import is not the agent's
    channel.receive()
    try:
        predict = import_file(solution, "predict.py", "solution_predict").predict
        out = predict(blocks, json.loads(config_json))
        direction = torch.as_tensor(out["direction"], dtype=torch.float64).flatten().tolist()
        reply = {"explode_layer": out["explode_layer"], "decay_layer": out["decay_layer"], "direction": direction}
        json.dumps(reply)
    except Exception as exc:
        tail = traceback.format_exc(limit=3)[-400:]
        reply = {"error": f"predict.py failed: {type(exc).__name__}: {exc}"[:300] + "\n" + tail}
    channel.send(reply)


if __name__ == "__main__":
    main()
