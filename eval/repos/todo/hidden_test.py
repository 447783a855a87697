import unittest

from todo import Task, dumps, loads


class Hidden(unittest.TestCase):
    def test_round_trip(self):
        tasks = [
            Task("Pay rent", done=True, priority="high"),
            Task("Water plants", priority="low"),
            Task("Buy milk"),
            Task("Call Bob", done=True, priority="low"),
        ]
        self.assertEqual(loads(dumps(tasks)), tasks)
        self.assertEqual(loads(dumps([])), [])

    def test_titles_kept(self):
        tasks = [Task("Read chapter 3, then sleep", priority="high")]
        self.assertEqual(loads(dumps(tasks))[0].title, "Read chapter 3, then sleep")

    def test_one_line_each(self):
        text = dumps([Task("a", priority="high"), Task("b")])
        self.assertEqual(len([line for line in text.splitlines() if line.strip()]), 2)

    def test_old_files(self):
        self.assertEqual(
            loads("[x] Buy milk\n\n[ ] Call the plumber\n"),
            [Task("Buy milk", done=True), Task("Call the plumber")],
        )

    def test_bad_line(self):
        with self.assertRaises(ValueError):
            loads("Buy milk\n")


if __name__ == "__main__":
    unittest.main()
