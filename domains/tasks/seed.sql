-- A few tasks for `local-user` (the one user of a chat run with CHAT_AUTH=none), due relative to
-- the day they are first loaded. Only when that user has no tasks yet, so a rerun changes
-- nothing. Runs with parley.caller set to local-user, so row-level security admits the rows
-- whatever role loads them.
SELECT set_config('parley.caller', '{"sub": "local-user"}', true);

INSERT INTO tasks (owner, title, notes, due_on, priority, status, tags, completed_at)
SELECT 'local-user', s.title, s.notes, current_date + s.due_in, s.priority, s.status, s.tags,
       CASE WHEN s.status = 'done' THEN now() END
FROM (VALUES
    (1, 'Renew the car insurance', 'Compare at least two quotes before the renewal date.', 3,
        'high', 'open', ARRAY['car', 'admin']),
    (2, 'Book a dentist appointment', '', -2, 'normal', 'open', ARRAY['health']),
    (3, 'Write the quarterly report', 'Wait for the figures from finance.', 7, 'high',
        'in_progress', ARRAY['work']),
    (4, 'Buy a birthday present for Sam', 'Something for the garden?', 10, 'normal', 'open',
        ARRAY['personal']),
    (5, 'Fix the leaking kitchen tap', '', NULL, 'low', 'open', ARRAY['home']),
    (6, 'Pay the council tax bill', '', -10, 'normal', 'done', ARRAY['admin', 'home'])
) AS s (n, title, notes, due_in, priority, status, tags)
WHERE NOT EXISTS (SELECT FROM tasks WHERE owner = 'local-user')
ORDER BY s.n;
