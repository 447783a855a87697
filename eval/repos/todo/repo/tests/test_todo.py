import unittest

from todo import Task, dumps, loads


class StorageTest(unittest.TestCase):
    def test_dumps(self):
        text = dumps([Task("Buy milk", done=True), Task("Call the plumber")])
        self.assertIn("Buy milk", text)
        self.assertEqual(len(text.splitlines()), 2)

    def test_round_trip(self):
        tasks = [Task("Buy milk", done=True), Task("Call the plumber")]
        self.assertEqual(loads(dumps(tasks)), tasks)

    def test_priority_is_kept(self):
        tasks = [Task("Pay rent", priority="high"), Task("Water plants", priority="low")]
        self.assertEqual(loads(dumps(tasks)), tasks)


if __name__ == "__main__":
    unittest.main()
