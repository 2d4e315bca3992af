# The local fleet's watcher of processes that are not the spawn helper's children (jobs a helper
# before it started: spawner.ts says why). Node has no pidfd API; Perl (perl-base, part of every
# Debian system) calls pidfd_open(2) directly and polls the descriptors: no process is checked on a
# timer, an end wakes it. Lines on standard input, lines out:
#
#   watch KEY PID STARTTIME   → `ended KEY` once that process (pid and start time, as /proc/PID/stat
#                               field 22 reads) is gone: also at once when it is gone already, or
#                               when PID is now another process
#                             → `unwatched KEY REASON` when it cannot be watched (no descriptor left)
#   unwatch KEY               → nothing more about KEY
#
# It ends when its standard input closes (the helper, its parent, is gone).
use strict;
use warnings;
# Only perl-base (every Debian system has it): IO::Handle loads the IO extension, which holds
# poll(2) as IO::Poll::_poll (IO::Poll.pm itself is in the fuller perl package).
use IO::Handle;
use POSIX ();

STDOUT->autoflush(1);
# pidfd_open is 434 on every architecture (the numbers from 424 on are shared since Linux 5.1).
my $PIDFD_OPEN = 434;
my ($POLLIN, $POLLERR, $POLLHUP) = (1, 8, 16);
# Watched processes: descriptor → key, key → descriptor.
my (%key_of, %fd_of);

sub starttime {
    my ($pid) = @_;
    open(my $f, '<', "/proc/$pid/stat") or return '';
    my $stat = <$f> // '';
    close $f;
    # The command (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    $stat =~ s/^.*\) //s;
    my @fields = split / /, $stat;
    return ($fields[0] // 'Z') eq 'Z' ? '' : ($fields[19] // '');
}

sub watch {
    my ($key, $pid, $start) = @_;
    return if exists $fd_of{$key};
    my $fd = syscall($PIDFD_OPEN, $pid + 0, 0);
    if ($fd < 0) {
        print($!{ESRCH} ? "ended $key\n" : "unwatched $key $!\n");
        return;
    }
    # Checked once the descriptor holds the process: a pid reused before the open is told apart.
    if (starttime($pid) ne $start) {
        POSIX::close($fd);
        print "ended $key\n";
        return;
    }
    $key_of{$fd} = $key;
    $fd_of{$key} = $fd;
}

sub forget {
    my ($key) = @_;
    my $fd = delete $fd_of{$key} // return;
    delete $key_of{$fd};
    POSIX::close($fd);
}

my $pending = '';
for (;;) {
    my @polled = (0, $POLLIN, map { ($_, $POLLIN) } keys %key_of);
    # Each events argument is replaced by what happened to its descriptor.
    next if IO::Poll::_poll(-1, @polled) <= 0;
    my ($stdin_fd, $stdin_events) = splice(@polled, 0, 2);
    while (my ($fd, $events) = splice(@polled, 0, 2)) {
        next if !($events & ($POLLIN | $POLLHUP | $POLLERR)) || !defined $key_of{$fd};
        my $key = $key_of{$fd};
        forget($key);
        print "ended $key\n";
    }
    next if !($stdin_events & ($POLLIN | $POLLHUP | $POLLERR));
    my $n = sysread(STDIN, my $chunk, 65536);
    exit 0 if !$n;
    $pending .= $chunk;
    while ($pending =~ s/^([^\n]*)\n//) {
        my ($verb, @args) = split / /, $1;
        next if !defined $verb;
        if ($verb eq 'watch' && @args == 3) { watch(@args) }
        elsif ($verb eq 'unwatch' && @args == 1) { forget($args[0]) }
    }
}
