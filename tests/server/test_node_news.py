"""Per-node news for long polls: news about a node wakes its waiters only, news recorded between
taking the versions and waiting is not lost, and news from another thread reaches the loop."""

from __future__ import annotations

import asyncio
import threading

from shoal.server.notify import NodeNews


def test_news_between_the_read_and_the_wait_is_not_lost() -> None:
    async def scenario() -> None:
        news = NodeNews()
        seen = news.versions(["n1"])
        news.news(["n1"])  # recorded after the versions were taken, before the wait
        assert await news.wait(["n1"], seen, timeout=5)
        assert news.waiting() == 0

    asyncio.run(scenario())


def test_news_wakes_only_the_waiters_of_its_nodes() -> None:
    async def scenario() -> None:
        news = NodeNews()
        waits = {
            node: asyncio.create_task(news.wait([node], news.versions([node]), timeout=5))
            for node in ("n1", "n2")
        }
        while news.waiting() < 2:
            await asyncio.sleep(0)
        news.news(["n1"])
        assert await waits["n1"]
        assert not waits["n2"].done()
        news.news()  # news for every node
        assert await waits["n2"]
        assert news.waiting() == 0

    asyncio.run(scenario())


def test_a_quiet_wait_ends_at_its_timeout_with_no_news() -> None:
    async def scenario() -> None:
        news = NodeNews()
        news.news(["other"])
        assert not await news.wait(["n1"], news.versions(["n1"]), timeout=0.05)

    asyncio.run(scenario())


def test_news_from_a_worker_thread_wakes_the_loop() -> None:
    async def scenario() -> None:
        news = NodeNews()
        waiting = asyncio.create_task(news.wait(["n1"], news.versions(["n1"]), timeout=5))
        while news.waiting() < 1:
            await asyncio.sleep(0)
        thread = threading.Thread(target=news.news, args=(["n1"],))
        thread.start()
        assert await waiting
        thread.join()

    asyncio.run(scenario())
