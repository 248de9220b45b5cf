# A CPU-bound round of pure Python (integers, strings, dicts, lists, sorting,
# calls, exceptions), repeated: prints one checksum per round, the same in
# every round. usage: python3 -u work.py ROUNDS (0: forever)
import sys


def mix(acc, i):
    acc = (acc * 31 + i * i) % 1000000007
    if i % 3 == 0:
        acc ^= acc >> 3
    return acc


def one_round():
    acc = 7
    for i in range(120000):
        acc = mix(acc, i)
    words = {}
    for i in range(20000):
        key = "w%d" % (i * 7919 % 5003)
        words[key] = words.get(key, 0) + i
    for k in sorted(words):
        acc = (acc + len(k) * words[k]) % 1000000007
    for i in range(3000):
        try:
            if i % 7 == 0:
                raise ValueError(i)
            acc += int(str(i)[::-1])
        except ValueError as e:
            acc ^= e.args[0]
    return acc


rounds = int(sys.argv[1])
done = 0
while rounds == 0 or done < rounds:
    print(one_round(), flush=True)
    done += 1
