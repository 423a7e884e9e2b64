"""A streams group's topology against the cluster's topics, as Kafka 4.4's ``InternalTopicManager``.

:func:`configure` takes the group's topology (the StreamsGroupTopology record value) and
the cluster (``partition_count(name)``, None for a missing topic) and decides:

* missing source topics -> status MISSING_SOURCE_TOPICS, no tasks;
* the partition count of every repartition topic without a fixed one: the most partitions of
  the source (and repartition source) topics of the subtopologies writing to it, repeated until
  every one is known (Kafka's ``RepartitionTopics``; a cycle that never resolves, or a
  repartition source no subtopology writes to, is STREAMS_INVALID_TOPOLOGY);
* copartition groups (``CopartitionedTopicsEnforcer``): repartition topics in a group take the
  partition count of its non-repartition topics, which must agree (INCORRECTLY_PARTITIONED_TOPICS);
* changelog topics: as many partitions as their subtopology has tasks (``ChangelogTopics``);
* internal topics that do not exist yet are returned to be created (status
  MISSING_INTERNAL_TOPICS until they exist); an existing one with another partition count is
  INCORRECTLY_PARTITIONED_TOPICS;
* each subtopology's number of tasks: the most partitions among its source topics.

The result is ready (tasks can be assigned) only without a status.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
INVALID_TOPOLOGY = -1  # not a status: the heartbeat fails with STREAMS_INVALID_TOPOLOGY


class TopologyError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class InternalTopic:
    name: str
    partitions: int
    replication_factor: int  # -1: the broker's default
    configs: dict[str, str]


@dataclass
class Configured:
    epoch: int
    # subtopology id -> (number of tasks, stateful, source topics incl. repartition sources)
    subtopologies: dict[str, tuple[int, bool, list[str]]] = field(default_factory=dict)
    to_create: dict[str, InternalTopic] = field(default_factory=dict)
    internal_partitions: dict[str, int] = field(default_factory=dict)  # every internal topic's decided count
    status: int | None = None
    detail: str = ""

    @property
    def ready(self) -> bool:
        return self.status is None


def _summary(topics) -> str:
    topics = list(topics)
    if not topics:
        return "<none>"
    more = f" and {len(topics) - 3} additional topics" if len(topics) > 3 else ""
    return ", ".join(topics[:3]) + more


def required_topics(topology) -> set[str]:
    names: set[str] = set()
    for s in topology.subtopologies:
        names.update(s.source_topics)
        names.update(s.repartition_sink_topics)
        names.update(t.name for t in s.repartition_source_topics)
        names.update(t.name for t in s.state_changelog_topics)
    return names


def configure(topology, partition_count) -> Configured:
    out = Configured(topology.epoch)
    try:
        missing = sorted({t for s in topology.subtopologies for t in s.source_topics if partition_count(t) is None})
        if missing:
            raise TopologyError(MISSING_SOURCE_TOPICS, f"Source topics {_summary(missing)} are missing.")
        decided: dict[str, int] = {}

        def count(topic: str) -> int | None:
            n = partition_count(topic)
            return n if n is not None else decided.get(topic)

        decided.update(_repartition_counts(topology, count))
        _copartition(topology, count, decided)
        tasks: dict[str, int] = {}
        for s in topology.subtopologies:
            sources = list(s.source_topics) + [t.name for t in s.repartition_source_topics]
            counts = [count(t) for t in sources]
            if not counts or any(c is None for c in counts):
                raise TopologyError(INVALID_TOPOLOGY, f"No source topics found for subtopology {s.subtopology_id}")
            tasks[s.subtopology_id] = max(counts)
            for t in s.state_changelog_topics:
                decided[t.name] = tasks[s.subtopology_id]
            out.subtopologies[s.subtopology_id] = (tasks[s.subtopology_id], bool(s.state_changelog_topics), sources)
        wanted: dict[str, InternalTopic] = {}
        for s in topology.subtopologies:
            for t in list(s.repartition_source_topics) + list(s.state_changelog_topics):
                wanted[t.name] = InternalTopic(t.name, t.partitions or decided[t.name],
                                               t.replication_factor or -1,
                                               {c.key: c.value for c in t.topic_configs or ()})
        out.internal_partitions = {name: t.partitions for name, t in wanted.items()}
        for name in sorted(required_topics(topology)):
            existing = partition_count(name)
            expected = wanted.get(name)
            if existing is None or expected is None:
                continue
            del wanted[name]
            if existing != expected.partitions:
                raise TopologyError(INCORRECTLY_PARTITIONED_TOPICS,
                                    f"Existing topic {name} has different number of partitions: expected "
                                    f"{expected.partitions}, found {existing}")
        out.to_create = wanted
        if wanted:
            out.status = MISSING_INTERNAL_TOPICS
            out.detail = f"Internal topics are missing: {_summary(sorted(wanted))}"
    except TopologyError as e:
        out.subtopologies, out.to_create = {}, {}
        out.status, out.detail = e.status, e.message
    return out


def _repartition_counts(topology, count) -> dict[str, int]:
    counts = {t.name: t.partitions for s in topology.subtopologies for t in s.repartition_source_topics
              if t.partitions}
    while True:
        needed = progress = False
        for s in topology.subtopologies:
            for sink in s.repartition_sink_topics:
                if sink in counts:
                    continue
                cands = [counts[t.name] for t in s.repartition_source_topics if t.name in counts]
                cands += [n for n in (count(t) for t in s.source_topics) if n is not None]
                if cands:
                    counts[sink] = max(cands)
                    progress = True
                else:
                    needed = True
        if not needed:
            break
        if not progress:
            raise TopologyError(INVALID_TOPOLOGY, "Failed to compute number of partitions for all repartition "
                                                  "topics. There may be loops in the topology that cannot be resolved.")
    for s in topology.subtopologies:
        if any(t.name not in counts for t in s.repartition_source_topics):
            raise TopologyError(INVALID_TOPOLOGY, "Failed to compute number of partitions for all repartition "
                                                  "topics, because a repartition source topic is never used as a "
                                                  "sink topic.")
    return counts


def _copartition(topology, count, decided: dict[str, int]) -> None:
    fixed = {t.name for s in topology.subtopologies for t in s.repartition_source_topics if t.partitions}
    flexible = {t.name for s in topology.subtopologies for t in s.repartition_source_topics if not t.partitions}
    for s in topology.subtopologies:
        for g in s.copartition_groups:
            topics = {s.source_topics[i] for i in g.source_topics} | \
                     {s.repartition_source_topics[i].name for i in g.repartition_source_topics}
            if not topics:
                continue
            repart = {t: count(t) for t in topics if t in fixed or t in flexible}
            others = {t: count(t) for t in topics if t not in repart}
            if set(repart) == topics:
                if fixed:
                    first = count(next(iter(sorted(fixed))))
                    if any(count(t) != first for t in fixed):
                        raise TopologyError(INCORRECTLY_PARTITIONED_TOPICS, "Following topics do not have the same "
                                            f"number of partitions: [{_fmt(repart)}]")
                    n = first
                else:
                    n = max((c or 0 for c in repart.values()), default=0)
                    if n == 0:
                        raise TopologyError(INVALID_TOPOLOGY, "All topics in the copartition group had undefined "
                                                              f"partition number: {sorted(repart)}")
            else:
                values = set(others.values())
                if len(values) != 1:
                    raise TopologyError(INCORRECTLY_PARTITIONED_TOPICS, "Following topics do not have the same "
                                        f"number of partitions: [{_fmt(others)}]")
                n = values.pop()
            for t, c in repart.items():
                if t in fixed and c != n:
                    raise TopologyError(INCORRECTLY_PARTITIONED_TOPICS,
                                        f"Number of partitions [{c}] of repartition topic [{t}] doesn't match number "
                                        f"of partitions [{n}] of the source topic.")
                decided[t] = n


def _fmt(d: dict[str, int | None]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(d.items())) + "}"
