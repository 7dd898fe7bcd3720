"""Pass 4, communication: connections between ranks and the messages on them.

Between two ranks, on one channel, the runtime matches sends and receives first-in first-out. So there
must be at most one thread block per (gpu, peer, direction, channel), and the sequence of ``cnt`` sent
r -> p on channel c must equal the sequence p receives from r on channel c. Leaves ``cx.connections``:
(src, dst, chan) -> (sender (gpu, tb) or None, receiver (gpu, tb) or None).
"""

from __future__ import annotations

from collections import defaultdict

from colls.program import receives, sends
from colls.verify.context import Context


def check(cx: Context) -> None:
    p, n = cx.p, cx.nranks
    if cx.has({"gpu-id", "ngpus-mismatch", "gpu-attr-missing"}):
        return                       # without a clean set of ranks, peers cannot be matched
    senders: dict = defaultdict(list)      # (src gpu, dst gpu, chan) -> [(gpu, tb)]
    receivers: dict = defaultdict(list)
    for g in p.gpus:
        if g.id is None:
            continue
        for tb in g.tbs:
            if tb.chan is None or tb.id is None:
                continue
            if tb.send is not None and 0 <= tb.send < n and tb.send != g.id:
                senders[(g.id, tb.send, tb.chan)].append((g, tb))
            if tb.recv is not None and 0 <= tb.recv < n and tb.recv != g.id:
                receivers[(tb.recv, g.id, tb.chan)].append((g, tb))
    for table, what in ((senders, "send to"), (receivers, "receive from")):
        for key, users in sorted(table.items()):
            if len(users) > 1:
                g = users[0][0]
                peer = key[1] if what == "send to" else key[0]
                ids = ", ".join(str(tb.id) for _, tb in users)
                cx.at("conn-duplicate", f"thread blocks {ids} all {what} gpu {peer} on channel {key[2]}: at most one "
                      "thread block per (peer, direction, channel), or their messages mix", g, users[1][1])
    for key in sorted(set(senders) | set(receivers)):
        s_users, r_users = senders.get(key, []), receivers.get(key, [])
        if len(s_users) > 1 or len(r_users) > 1:
            continue
        sender = s_users[0] if s_users else None
        receiver = r_users[0] if r_users else None
        cx.connections[key] = (sender, receiver)
        _match(cx, key, sender, receiver)


def _match(cx: Context, key, sender, receiver) -> None:
    src, dst, chan = key
    sent = [(i, st.cnt) for i, st in enumerate(sender[1].steps) if sends(st.type)] if sender else []
    got = [(i, st.cnt) for i, st in enumerate(receiver[1].steps) if receives(st.type)] if receiver else []
    for k, ((si, sc), (ri, rc)) in enumerate(zip(sent, got)):
        if sc != rc:
            cx.at("conn-mismatch", f"message #{k + 1} from gpu {src} to gpu {dst} on channel {chan}: this step sends "
                  f"cnt={sc}, but gpu {dst} tb {receiver[1].id} step {ri} receives cnt={rc}", sender[0], sender[1], si)
            break
    if len(sent) > len(got):
        si = sent[len(got)][0]
        if receiver is None:
            why = f"gpu {dst} has no thread block receiving from gpu {src} on channel {chan}"
        else:
            why = f"gpu {dst} tb {receiver[1].id} receives only {len(got)} from gpu {src} on channel {chan}"
        cx.at("conn-unmatched", f"sends message #{len(got) + 1} to gpu {dst} on channel {chan}, but {why}; "
              f"{len(sent) - len(got)} message(s) are never received", sender[0], sender[1], si)
    elif len(got) > len(sent):
        ri = got[len(sent)][0]
        if sender is None:
            why = f"gpu {src} has no thread block sending to gpu {dst} on channel {chan}"
        else:
            why = f"gpu {src} tb {sender[1].id} sends only {len(sent)} to gpu {dst} on channel {chan}"
        cx.at("conn-unmatched", f"receives message #{len(sent) + 1} from gpu {src} on channel {chan}, but {why}; "
              "the receive waits forever", receiver[0], receiver[1], ri)
