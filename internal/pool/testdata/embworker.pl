#!/usr/bin/perl
# A worker shaped as mimedefang.pl is for -E: main() returns after
# compiling when its last argument is -embserver (the zygote then calls
# do_main_loop in each worker it forks), and serves itself with -server.
use strict;
our $CompiledBy = $$;
# EMB_HOLD=<file>: compiling the program writes <file>.compiling, then
# waits until <file> exists (a filter slow to compile, held by the test).
BEGIN {
	if (my $hold = $ENV{EMB_HOLD}) {
		open(my $f, '>', "$hold.compiling") or die "$hold.compiling: $!";
		close $f;
		select(undef, undef, undef, 0.01) until -e $hold;
	}
}
our $Mode = '';

sub main {
	$Mode = $ARGV[-1];
	return 0 if $Mode =~ /^-emb/;
	do_main_loop();
}

sub do_main_loop {
	$| = 1;
	while (my $line = <STDIN>) {
		chomp $line;
		if ($line eq 'compiled') {
			print "$CompiledBy\n";
		} elsif ($line eq 'mode') {
			print "$Mode\n";
		} elsif ($line eq 'pid') {
			print "$$\n";
		} elsif ($line =~ /^hold (.*)/) {
			# Busy until the file exists.
			select(undef, undef, undef, 0.01) until -e $1;
			print "held\n";
		} else {
			print "echo $line\n";
		}
	}
	exit(0);
}

exit(&main) unless caller;
1;
