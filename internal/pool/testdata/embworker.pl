#!/usr/bin/perl
# A worker shaped as mimedefang.pl is for -E: main() returns after
# compiling when its last argument is -embserver (the zygote then calls
# do_main_loop in each worker it forks), and serves itself with -server.
use strict;
our $CompiledBy = $$;
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
		} else {
			print "echo $line\n";
		}
	}
	exit(0);
}

exit(&main) unless caller;
1;
