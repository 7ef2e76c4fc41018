package ingest

// parseRFC3339 parses s as time.Parse(time.RFC3339Nano, s) does on its
// strict path, straight to Unix milliseconds (sub-millisecond digits
// truncated), without a time.Time or a time zone.
func parseRFC3339(s string) (ms int64, ok bool) {
	if len(s) < len("2006-01-02T15:04:05Z") ||
		s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return 0, false
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	sec, ok6 := digits(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return 0, false
	}
	s = s[19:]
	var frac int64
	if len(s) >= 2 && s[0] == '.' && isDigit(s[1]) {
		n := 1
		for ; n < len(s) && isDigit(s[n]); n++ {
			if n <= 3 {
				frac = frac*10 + int64(s[n]-'0')
			}
		}
		for k := n; k <= 3; k++ {
			frac *= 10
		}
		s = s[n:]
	}
	var offset int64
	switch {
	case s == "Z":
	case len(s) == len("+07:00") && (s[0] == '+' || s[0] == '-') && s[3] == ':':
		oh, ok1 := digits(s[1:3])
		om, ok2 := digits(s[4:6])
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return 0, false
		}
		offset = (oh*60 + om) * 60
		if s[0] == '-' {
			offset = -offset
		}
	default:
		return 0, false
	}
	secs := daysSinceEpoch(year, month, day)*86400 + hour*3600 + minute*60 + sec - offset
	return secs*1000 + frac, true
}

// digits parses a string of ASCII digits.
func digits(s string) (int64, bool) {
	var n int64
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

func daysIn(month, year int64) int64 {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysSinceEpoch is the number of days from 1970-01-01 to the given date
// of the proleptic Gregorian calendar (Howard Hinnant's days_from_civil:
// years start in March, so the leap day ends a year).
func daysSinceEpoch(year, month, day int64) int64 {
	if month <= 2 {
		year--
	}
	era := year
	if era < 0 {
		era -= 399
	}
	era /= 400
	yoe := year - era*400                     // [0, 399]
	doy := (153*((month+9)%12)+2)/5 + day - 1 // [0, 365]
	doe := yoe*365 + yoe/4 - yoe/100 + doy    // [0, 146096]
	return era*146097 + doe - 719468
}
