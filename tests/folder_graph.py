"""Prints the folder-level import graph of `sdk/` and `tools/` (the rooms of tests/test_architecture.py): its
strongly connected components and, per room, the modules of other rooms it imports. `python -m tests.folder_graph`"""

from __future__ import annotations

from tests.test_architecture import circles, import_graph, room_graph


def main() -> None:
    rooms = room_graph(import_graph())
    for component in circles({room: set(edges) for room, edges in rooms.items()}):
        print(f"SCC of {len(component)}: {' '.join(component)}")
    for room, edges in sorted(rooms.items()):
        modules = {e.split(" -> ")[1] for why in edges.values() for e in why}
        own = {m for m in modules if m.split(".")[0] == room.split(".")[0]}
        print(f"{room:20} {len(modules):3} modules ({len(own):2} of its package's) from {len(edges):2} rooms: {' '.join(sorted(edges))}")


if __name__ == "__main__":
    main()
