"""Records on disk, as plain data (nothing here knows a model, a constraint or a spec object).

- `files.py`: what an output's name stands for: a stream, or a file known by its identity
  (device and inode, links followed), whose configuration lives beside its real name;
- `jsonl.py`: JSONL lines written whole, and read a line at a time within limits;
- `lock.py`: the locks an output file is written under, whatever name it is given;
- `resume.py`: which records of a run a process writes (its shard, less what is already
  there), and the writing loop that says, on Ctrl-C, what was kept and how to finish;
- `config.py`: the resolved configuration beside an output file, and the check that a file
  holds one configuration's records;
- `shards.py`: `cdd merge`, shards of one run merged into one file;
- `distributed.py`: torchrun's ranks, each writing a part, gathered into one file.
"""
